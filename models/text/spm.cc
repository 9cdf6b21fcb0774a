// cgrad zoo: the C API of models/text/spm.h over SentencePiece's C++ API.
//
// Every entry point catches every exception (std::bad_alloc included) and
// turns it into a message in the error slot; SentencePiece reports its own
// failures through util::Status, whose message is passed on. Training asks
// for fatal log messages only (its "minloglevel" flag), so it prints nothing.
#include "models/text/spm.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "core/utf8.h"

struct cg_spm {
    sentencepiece::SentencePieceProcessor sp;
    std::string proto; // SentencePiece's serialized model
    int64_t vocab;
};

namespace
{

const unsigned char MAGIC[8] = {'C', 'G', 'S', 'P', 'M', 0, 0, 1};
const size_t HEADER = 24;

uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

// Load a serialized model into t and check that it follows the zoo's id
// conventions. False + error.
bool load_proto(cg_spm *t, const char *who)
{
    auto st = t->sp.LoadFromSerializedProto(t->proto);
    if (!st.ok()) {
        cg_set_error("%s: not a SentencePiece model: %s", who, st.ToString().c_str());
        return false;
    }
    int v = t->sp.GetPieceSize();
    if (v < CG_SPM_MIN_VOCAB || t->sp.pad_id() != CG_SPM_PAD || t->sp.bos_id() != CG_SPM_BOS ||
        t->sp.eos_id() != CG_SPM_EOS || t->sp.unk_id() != CG_SPM_UNK ||
        t->sp.IdToPiece(4) != "<0x00>" || t->sp.IdToPiece(259) != "<0xFF>") {
        cg_set_error("%s: the SentencePiece model does not follow the zoo's conventions "
                     "(%d pieces, pad %d, bos %d, eos %d, unk %d, byte pieces at 4..259)",
                     who, v, t->sp.pad_id(), t->sp.bos_id(), t->sp.eos_id(), t->sp.unk_id());
        return false;
    }
    t->vocab = v;
    // lossless, as every model the zoo trains is: runs of spaces (the word
    // boundary's own piece), tabs, newlines, characters with no piece (byte
    // fallback). A model that loses pieces or bytes gave back other text.
    static const char probe[] = "  a  b\t\n\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80 ";
    int64_t n = 0, *ids = cg_spm_encode(t, probe, &n);
    char *back = ids ? cg_spm_decode(t, ids, n) : nullptr;
    bool same = back && strcmp(back, probe) == 0;
    free(ids);
    free(back);
    if (!same)
        cg_set_error("%s: the SentencePiece model does not give text back as it was (spaces, tabs, "
                     "newlines or characters without a piece come back changed), as the zoo's "
                     "tokenizers do",
                     who);
    return same;
}

// Sentences from a C array, for the trainer.
class ArrayIterator : public sentencepiece::SentenceIterator
{
  public:
    ArrayIterator(const char *const *s, int64_t n) : s_(s), n_(n) { load(); }
    bool done() const override { return i_ >= n_; }
    void Next() override
    {
        i_++;
        load();
    }
    const std::string &value() const override { return cur_; }
    sentencepiece::util::Status status() const override { return {}; }

  private:
    void load()
    {
        if (i_ < n_)
            cur_.assign(s_[i_]);
    }
    const char *const *s_;
    int64_t n_, i_ = 0;
    std::string cur_;
};

} // namespace

/* Called from a catch (...) block: the error slot gets the exception in
 * flight as one line naming `who`; nothing is rethrown across the C API. */
static void set_error_from_exception(const char *who)
{
    try {
        throw;
    } catch (const std::bad_alloc &) {
        cg_set_error("%s: out of memory", who);
    } catch (const std::exception &e) {
        cg_set_error("%s: %s", who, e.what());
    } catch (...) {
        cg_set_error("%s: unexpected failure in SentencePiece", who);
    }
}

/* SentencePiece's trainer normalizes the sentences in threads of its own
 * (TrainerInterface::LoadSentences, at num_threads 1 too): an exception there
 * (std::bad_alloc) cannot reach cg_spm_train's catch and ended the process
 * through std::terminate (SIGABRT, "terminate called after throwing").
 * While the trainer runs, the terminate handler ends it with one line and
 * exit 1 instead: nothing has been written yet, and no caller could go on.
 * exit: std::terminate must not return, and other threads are mid-work
 * (write and _exit only). */
[[noreturn]] static void on_trainer_terminate()
{
    const char *what = "unexpected failure in SentencePiece's trainer";
    try {
        if (std::current_exception())
            std::rethrow_exception(std::current_exception());
    } catch (const std::bad_alloc &) {
        what = "out of memory";
    } catch (const std::exception &e) {
        what = e.what();
    } catch (...) {
    }
    char line[512];
    int k = snprintf(line, sizeof line, "%s: error: training the BPE tokenizer: %s\n",
                     program_invocation_short_name, what);
    if (k > (int)sizeof line - 1)
        k = (int)sizeof line - 1;
    ssize_t w = write(STDERR_FILENO, line, k > 0 ? (size_t)k : 0);
    (void)w;
    _exit(1);
}

// Sets on_trainer_terminate for its lifetime, then puts the previous back.
class TrainerTerminate
{
  public:
    TrainerTerminate() : prev_(std::set_terminate(on_trainer_terminate)) {}
    ~TrainerTerminate() { std::set_terminate(prev_); }
    TrainerTerminate(const TrainerTerminate &) = delete;
    TrainerTerminate &operator=(const TrainerTerminate &) = delete;

  private:
    std::terminate_handler prev_;
};

/* Each of the n sentences given to the trainer is one line of UTF-8 text:
 * false + error naming `who` and the first that is not. *longest: the
 * longest sentence's bytes. */
static bool sentences_ok(const char *who, const char *const *sentences, int64_t n, size_t *longest)
{
    *longest = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!sentences[i]) {
            cg_set_error("%s: sentence %lld is NULL", who, (long long)i);
            return false;
        }
        size_t len = strlen(sentences[i]), bad = 0;
        if (cg_utf8_count(sentences[i], len, &bad) < 0) {
            cg_set_error("%s: sentence %lld is not valid UTF-8 (bad byte at offset %zu)", who,
                         (long long)i, bad);
            return false;
        }
        if (memchr(sentences[i], '\n', len)) {
            cg_set_error("%s: sentence %lld holds a newline (give one sentence per entry)", who,
                         (long long)i);
            return false;
        }
        if (len > INT32_MAX) {
            cg_set_error("%s: sentence %lld is longer than 2 GiB", who, (long long)i);
            return false;
        }
        *longest = len > *longest ? len : *longest;
    }
    return true;
}

/* The ids of text[0..len) as one call of SentencePiece's Encode gives
 * them, in pieces of about CHUNK bytes: its encoder holds about 75 bytes a
 * byte of what it is given (3.9 GB for the 45 MB training split of a 50 MB
 * corpus). A piece is cut before a space or newline, which no piece holds
 * past its start (pieces begin at a word boundary, and training sentences
 * have no newline): a piece after the first then reads as the dummy
 * prefix's word-boundary piece, alone, which is dropped, and the ids the
 * whole text has there. Where that does not hold (no such place in a
 * chunk's second half: CJK; another first id) the rest is encoded whole. */
namespace
{

const size_t CHUNK = (size_t)1 << 20;

sentencepiece::util::Status encode_ids(const cg_spm *t, const char *text, size_t len,
                                       std::vector<int> *ids)
{
    const int boundary = t->sp.PieceToId("\xE2\x96\x81");
    size_t p = 0;
    std::vector<int> part;
    while (p < len) {
        size_t e = len;
        if (len - p > CHUNK) {
            e = p + CHUNK;
            while (e > p + CHUNK / 2 && text[e] != ' ' && text[e] != '\n')
                e--;
            e = text[e] == ' ' || text[e] == '\n' ? e : len;
        }
        auto st = t->sp.Encode(std::string(text + p, e - p), &part);
        if (!st.ok())
            return st;
        if (p > 0 && (part.empty() || part[0] != boundary || boundary == t->sp.unk_id())) {
            ids->clear(); /* not cut after all */
            return t->sp.Encode(std::string(text, len), ids);
        }
        ids->insert(ids->end(), part.begin() + (p > 0), part.end());
        p = e;
    }
    return {};
}

} // namespace

/* The trainer's status: true when it is ok, else false + its error in the
 * zoo's words. */
static bool train_status_ok(const sentencepiece::util::Status &st, const char *who,
                            int64_t vocab_size)
{
    if (st.ok())
        return true;
    long long have = 0, need = 0;
    const std::string msg = st.ToString();
    const char *req = strstr(msg.c_str(), "smaller than required_chars. ");
    if (req && sscanf(req, "smaller than required_chars. %lld vs %lld", &have, &need) == 2)
        /* its message names a flag of its own; ours says what to do */
        cg_set_error("--vocab-size %lld is too small for this text: BPE needs at least %lld "
                     "ids (260 + one piece for each character and for the word boundary)",
                     (long long)vocab_size, need);
    else if (strstr(msg.c_str(), "cannot parse \""))
        /* every option value is ours and parses: SentencePiece reads them
         * through a stringstream, which turns a failed allocation into a
         * value it "cannot parse" */
        cg_set_error("%s: out of memory", who);
    else
        cg_set_error("%s: SentencePiece: %s", who, msg.c_str());
    return false;
}

extern "C" {

bool cg_spm_available(void) { return true; }

cg_spm *cg_spm_train(const char *const *sentences, int64_t n, int64_t vocab_size)
{
    static const char who[] = "cg_spm_train";
    if (!sentences || n <= 0) {
        cg_set_error("%s: no sentences to train on (n = %lld)", who, (long long)n);
        return nullptr;
    }
    if (vocab_size < CG_SPM_MIN_VOCAB || vocab_size > 1000000) {
        cg_set_error("%s: vocabulary size %lld is outside %d .. 1000000 (4 special ids and 256 "
                     "byte pieces come first)",
                     who, (long long)vocab_size, CG_SPM_MIN_VOCAB);
        return nullptr;
    }
    size_t longest;
    if (!sentences_ok(who, sentences, n, &longest))
        return nullptr;
    cg_spm *t = nullptr;
    try {
        std::unordered_map<std::string, std::string> kw = {
            {"model_type", "bpe"},
            {"vocab_size", std::to_string(vocab_size)},
            {"character_coverage", "1.0"},
            {"byte_fallback", "true"},
            {"normalization_rule_name", "identity"},
            {"remove_extra_whitespaces", "false"},
            {"add_dummy_prefix", "true"},
            {"hard_vocab_limit", "false"},
            {"pad_id", "0"},
            {"bos_id", "1"},
            {"eos_id", "2"},
            {"unk_id", "3"},
            {"pad_piece", "<pad>"},
            {"bos_piece", "<s>"},
            {"eos_piece", "</s>"},
            {"unk_piece", "<unk>"},
            {"unk_surface", "\xe2\x81\x87"},
            {"num_threads", "1"},
            {"minloglevel", "3"},
            /* its default (4192 bytes) skips a longer sentence, silently:
             * its characters got no piece */
            {"max_sentence_length", std::to_string(longest > 4192 ? longest : 4192)},
        };
        ArrayIterator it(sentences, n);
        t = new cg_spm();
        TrainerTerminate guard;
        auto st = sentencepiece::SentencePieceTrainer::Train(kw, &it, &t->proto);
        if (!train_status_ok(st, who, vocab_size) || !load_proto(t, who)) {
            delete t;
            return nullptr;
        }
        return t;
    } catch (...) {
        set_error_from_exception(who);
    }
    delete t;
    return nullptr;
}

/* A tokenizer from SentencePiece's serialized model (copied), or NULL +
 * error (who names the caller). */
static cg_spm *from_proto(const unsigned char *model, size_t len, const char *who)
{
    cg_spm *t = nullptr;
    try {
        t = new cg_spm();
        t->proto.assign(reinterpret_cast<const char *>(model), len);
        if (load_proto(t, who))
            return t;
    } catch (...) {
        set_error_from_exception(who);
    }
    delete t;
    return nullptr;
}

cg_spm *cg_spm_from_blob(const void *blob, size_t len)
{
    static const char who[] = "cg_spm_from_blob";
    if (!blob) {
        cg_set_error("%s: NULL blob", who);
        return nullptr;
    }
    const unsigned char *b = static_cast<const unsigned char *>(blob);
    if (len < HEADER || memcmp(b, MAGIC, sizeof MAGIC) != 0) {
        cg_set_error("%s: not a cgrad tokenizer blob (%zu bytes, %s)", who, len,
                     len < HEADER ? "shorter than its 24-byte header" : "wrong magic");
        return nullptr;
    }
    uint64_t n = get_u64(b + 8), sum = get_u64(b + 16);
    if (n != len - HEADER) {
        cg_set_error("%s: the blob is %s: its header announces %llu bytes of model, it holds %zu",
                     who, n > len - HEADER ? "truncated" : "too long", (unsigned long long)n,
                     len - HEADER);
        return nullptr;
    }
    if (fnv1a(b + HEADER, len - HEADER) != sum) {
        cg_set_error("%s: the blob is damaged (checksum mismatch)", who);
        return nullptr;
    }
    return from_proto(b + HEADER, len - HEADER, who);
}

cg_spm *cg_spm_from_model_proto(const void *model, size_t len)
{
    static const char who[] = "cg_spm_from_model_proto";
    if (!model) {
        cg_set_error("%s: NULL model", who);
        return nullptr;
    }
    return from_proto(static_cast<const unsigned char *>(model), len, who);
}

unsigned char *cg_spm_blob(const cg_spm *t, size_t *len)
{
    if (!t)
        return cg_error_null_input("cg_spm_blob"), nullptr;
    size_t n = HEADER + t->proto.size();
    unsigned char *b = static_cast<unsigned char *>(malloc(n));
    if (!b) {
        cg_set_error("cg_spm_blob: out of memory");
        return nullptr;
    }
    memcpy(b, MAGIC, sizeof MAGIC);
    const unsigned char *p = reinterpret_cast<const unsigned char *>(t->proto.data());
    put_u64(b + 8, t->proto.size());
    put_u64(b + 16, fnv1a(p, t->proto.size()));
    memcpy(b + HEADER, p, t->proto.size());
    if (len)
        *len = n;
    return b;
}

const unsigned char *cg_spm_model_proto(const cg_spm *t, size_t *len)
{
    if (!t)
        return cg_error_null_input("cg_spm_model_proto"), nullptr;
    if (len)
        *len = t->proto.size();
    return reinterpret_cast<const unsigned char *>(t->proto.data());
}

void cg_spm_free(cg_spm *t) { delete t; }

int64_t cg_spm_vocab_size(const cg_spm *t) { return t ? t->vocab : -1; }

int64_t *cg_spm_encode(const cg_spm *t, const char *text, int64_t *n)
{
    static const char who[] = "cg_spm_encode";
    if (!t)
        return cg_error_null_input(who), nullptr;
    if (!text) {
        cg_set_error("%s: NULL text", who);
        return nullptr;
    }
    size_t len = strlen(text), bad = 0;
    if (cg_utf8_count(text, len, &bad) < 0) {
        cg_set_error("%s: the text is not valid UTF-8 (bad byte at offset %zu)", who, bad);
        return nullptr;
    }
    try {
        std::vector<int> ids;
        auto st = encode_ids(t, text, len, &ids);
        if (!st.ok()) {
            cg_set_error("%s: SentencePiece: %s", who, st.ToString().c_str());
            return nullptr;
        }
        int64_t *out = static_cast<int64_t *>(malloc((ids.size() ? ids.size() : 1) * sizeof *out));
        if (!out) {
            cg_set_error("%s: out of memory", who);
            return nullptr;
        }
        for (size_t i = 0; i < ids.size(); i++)
            out[i] = ids[i];
        if (n)
            *n = (int64_t)ids.size();
        return out;
    } catch (...) {
        set_error_from_exception(who);
    }
    return nullptr;
}

char *cg_spm_decode(const cg_spm *t, const int64_t *ids, int64_t n)
{
    static const char who[] = "cg_spm_decode";
    if (!t)
        return cg_error_null_input(who), nullptr;
    if (n < 0 || (n > 0 && !ids)) {
        cg_set_error("%s: %lld ids at %s", who, (long long)n, ids ? "ids" : "NULL");
        return nullptr;
    }
    try {
        std::vector<int> v((size_t)n);
        for (int64_t i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= t->vocab) {
                cg_set_error("%s: id %lld at position %lld is outside the vocabulary [0, %lld)",
                             who, (long long)ids[i], (long long)i, (long long)t->vocab);
                return nullptr;
            }
            v[(size_t)i] = (int)ids[i];
        }
        std::string s;
        auto st = t->sp.Decode(v, &s);
        if (!st.ok()) {
            cg_set_error("%s: SentencePiece: %s", who, st.ToString().c_str());
            return nullptr;
        }
        /* the byte piece <0x00> gives a NUL, which would end the C string
         * there: U+FFFD instead, as SentencePiece gives for the bytes it
         * cannot decode as text */
        for (size_t i = 0; (i = s.find('\0', i)) != std::string::npos; i += 3)
            s.replace(i, 1, "\xEF\xBF\xBD");
        char *out = static_cast<char *>(malloc(s.size() + 1));
        if (!out) {
            cg_set_error("%s: out of memory", who);
            return nullptr;
        }
        memcpy(out, s.data(), s.size());
        out[s.size()] = '\0';
        return out;
    } catch (...) {
        set_error_from_exception(who);
    }
    return nullptr;
}

const char *cg_spm_piece(const cg_spm *t, int64_t id)
{
    if (!t)
        return cg_error_null_input("cg_spm_piece"), nullptr;
    if (id < 0 || id >= t->vocab) {
        cg_set_error("cg_spm_piece: id %lld is outside the vocabulary [0, %lld)", (long long)id,
                     (long long)t->vocab);
        return nullptr;
    }
    try {
        return t->sp.IdToPiece((int)id).c_str();
    } catch (...) {
        cg_set_error("cg_spm_piece: unexpected failure in SentencePiece");
        return nullptr;
    }
}

} // extern "C"
