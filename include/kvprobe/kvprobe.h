/* kvprobe — public API umbrella header.
 *
 *   gguf.h       GGUF reader (mmap, validated)
 *   tensor.h     element types, dequantization, row dot products
 *   model.h      model loading, execution context, forward pass
 *   kv.h         the editable KV cache (paged, shared, evictable)
 *   splice.h     the study's intervention
 *   policy.h     KV cache policies for inference: scaffold sharing, StreamingLLM, H2O, SnapKV
 *   tokenizer.h  SPM and byte-level BPE tokenizers from GGUF metadata
 *   sample.h     greedy / seeded sampling */
#ifndef KVPROBE_H
#define KVPROBE_H

#define KVPROBE_VERSION "0.1.0"

#include "kvprobe/error.h"
#include "kvprobe/gguf.h"
#include "kvprobe/kv.h"
#include "kvprobe/model.h"
#include "kvprobe/sample.h"
#include "kvprobe/tensor.h"
#include "kvprobe/tokenizer.h"
#include "kvprobe/chat.h"
#include "kvprobe/splice.h"
#include "kvprobe/policy.h"
#include "kvprobe/eval.h"
#include "kvprobe/sandbox.h"
#include "kvprobe/sweep.h"

#endif
