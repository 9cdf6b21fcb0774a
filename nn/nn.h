/* cgrad nn: everything needed to build and train models (umbrella header).
 *   nn/module.h       module base, parameter registry, save/load
 *   nn/layers.h       Linear, Embedding, LayerNorm/RMSNorm, Dropout,
 *                     sinusoidal positions, FeedForward
 *   nn/conv.h         Conv1d, Conv2d, Conv3d, ConvTranspose1d/2d/3d (torch.nn's)
 *   nn/spatial.h      pools, padding and Flatten as modules (MaxPool2d, ReflectionPad2d, ...)
 *   nn/upsample.h     Upsample, UpsamplingNearest2d/Bilinear2d (torch.nn's)
 *   nn/rnn.h          recurrent modules: RNN, GRU, LSTM and their cells (torch.nn's)
 *   nn/attention.h    MultiHeadAttention, masks, scaled dot-product attention
 *   nn/transformer.h  encoder/decoder layers, CharLM block, stacks
 *   nn/kv_cache.h     the key/value cache of incremental decoding
 *   nn/lora.h         LoRA adapters on Linear layers (PEFT-compatible files)
 *   nn/param.h        weight norm and spectral norm (torch.nn.utils')
 *   nn/torch_names.h  PyTorch's nn.Transformer* state-dict names (in_proj)
 *   nn/sample.h       sampling from logits (temperature, top-k, top-p)
 *   nn/data.h         batches of token ids (get_batch, epochs)
 *   nn/init.h         initialisers (normal, Xavier, Kaiming; PyTorch's defaults, models.py init_params)
 *   nn/safetensors.h  the checkpoint file format */
#ifndef CG_NN_H
#define CG_NN_H

#include "../autograd/autograd.h"
#include "../autograd/ops.h"
#include "../nn/attention.h"
#include "../nn/batchnorm.h"
#include "../nn/conv.h"
#include "../nn/upsample.h"
#include "../nn/init.h"
#include "../nn/kv_cache.h"
#include "../nn/layers.h"
#include "../nn/lora.h"
#include "../nn/param.h"
#include "../nn/rnn.h"
#include "../nn/data.h"
#include "../nn/sample.h"
#include "../nn/spatial.h"
#include "../nn/module.h"
#include "../nn/safetensors.h"
#include "../nn/torch_names.h"
#include "../nn/transformer.h"

#endif
