/* cgrad: everything a model needs, in one include.
 * Installed as include/cgrad/cgrad.h; `pkg-config --cflags cgrad` puts
 * include/cgrad on the include path, so write #include "cgrad.h" (or the
 * individual headers: "core/tensor.h", "nn/nn.h", "optim/optim.h", ...). */
#ifndef CG_CGRAD_H
#define CG_CGRAD_H

#include "autograd/autograd.h"
#include "autograd/checkpoint.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/clock.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/parse.h"
#include "core/random.h"
#include "core/tensor.h"
#include "core/version.h"
#include "nn/nn.h"
#include "optim/ema.h"
#include "optim/optim.h"
#include "optim/plateau.h"
#include "optim/schedule.h"
#include "optim/train_state.h"

#endif
