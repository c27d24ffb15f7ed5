/* Model blob (PMDL, docs/spec.md section 2): parse, validate and hash. */
#ifndef POET_MODEL_H
#define POET_MODEL_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "ops/optable.h"
#include "util.h"

/* Blob layout (docs/spec.md section 2): a 16-byte header, a u32 per parameter, a 56-byte record
 * per node. The blob lives in the port's nv storage (flash), read in place: its size is bounded by
 * the nv region, not by RAM. Node indices are u16 with 0xFFFF meaning "no dep". */
#define POET_MODEL_HDR 16u
#define POET_NODE_SZ 56u
#define POET_N_ATTRS 10 /* a node's i32 attribute slots a0..a9 */
#define POET_MAX_NODES 0xFFFEu
#define POET_MAX_PARAMS 0xFFFFu

/* The RAM a parsed model needs beyond its blob, in the pool's first region (docs/spec.md 6): per
 * parameter its element offset; per node its swap offset, its arena offset (interpreter and
 * schedule validator) and the validator's flags. */
#define POET_TABLE_PARAM_BYTES 4u
#define POET_TABLE_NODE_BYTES 9u

/* The opcodes, POET_OP_<NAME> = NUMBER, made from the op table (ops/optable.h), where each number is
 * written once. */
#define POET_OP_ENUM(name, number, kind, flag, nattrs, check, run) POET_OP_##name = (number),
enum { POET_OP_TABLE(POET_OP_ENUM) };

/* avgpool2d's a6 packs padding and strides (docs/spec.md section 2). */
#define POET_POOL_PAD_H(a6) ((a6) & 0xFF)
#define POET_POOL_PAD_W(a6) (((a6) >> 8) & 0xFF)
#define POET_POOL_STRIDE_H(a6) ((((a6) >> 16) & 0xFF) + 1)
#define POET_POOL_STRIDE_W(a6) ((((a6) >> 24) & 0xFF) + 1)

/* conv2d's a5 packs its kernel window and width padding, a6 the rest of the geometry that does not
 * fit the ten attributes (docs/spec.md section 2). */
#define POET_CONV_KH(a5) ((a5) & 0xFF)
#define POET_CONV_KW(a5) (((a5) >> 8) & 0xFF)
#define POET_CONV_PAD_W(a5) (((a5) >> 16) & 0xFF)
/* a5's top byte: 0, or the rows of padding below + 1 where they differ from those above (a row strip of a
 * patch-based stage, conv2d_q only: poet.plan.transform.patches) */
#define POET_CONV_PAD_B(a5, ph) (((a5) >> 24) & 0x7F ? (((a5) >> 24) & 0x7F) - 1 : (ph))
#define POET_CONV_PAD_H(a6) ((a6) & 0xFF)
#define POET_CONV_STRIDE(a6) ((((a6) >> 8) & 0xFF) + 1)
#define POET_CONV_GROUPS(a6) ((((a6) >> 16) & 0xFFFF) + 1)

/* Element types of a cast's a1 (from) and a2 (to) (docs/spec.md section 2). Every other op's
 * tensors are fp32 but the static-int8 ones' (ops/quant.c); int8 ones are quantised with one fp32
 * scale per tensor (an absmax node, or for static int8 a frozen parameter). */
enum { POET_DT_F32 = 0, POET_DT_F16 = 1, POET_DT_BF16 = 2, POET_DT_I8 = 3 };
/* Not an element type a cast takes: an act_mask's bits, which only mask_bwd reads (ops/elementwise.c). */
enum { POET_DT_BITS = 4 };

/* Param table word (docs/spec.md section 2): the element count and where the tensor lives.
 * Trained (top bits clear): in RAM, with a gradient and optimizer state. POET_PARAM_FROZEN: not
 * trained and never written (a frozen layer's weight, the running statistics a frozen batch norm
 * normalises with): read in place from nv storage (the frozen weights blob), never copied into
 * RAM. POET_PARAM_STATE: not trained but moved by the forward pass (the running statistics of a
 * batch norm in training mode): in RAM after every trained parameter, with no gradient, since
 * flash is not written while a step runs. POET_PARAM_I8, only with FROZEN: stored as int8 with one
 * fp32 scale (the scale's word, then the elements, padded to a word), read only by an int8 layer
 * (linear_i8, conv2d_i8 with two deps). POET_PARAM_AUX, only with FROZEN and I8: stored in the same
 * format on aux storage (the SD card), after the swap area, when flash cannot hold it; read by a
 * static-int8 conv (conv2d_q) or a forward linear of a weight-only int8 layer, which stream it through
 * the pool's stream buffer a few output channels (features) at a time (ops/quant.c, ops/linear.c). */
#define POET_PARAM_FROZEN 0x80000000u
#define POET_PARAM_STATE 0x40000000u
#define POET_PARAM_I8 0x20000000u
#define POET_PARAM_AUX 0x10000000u
#define POET_PARAM_ELEMS_MASK 0x0FFFFFFFu
#define POET_NO_GRAD 0xFFFFFFFFu


/* A float attribute: the blob stores its binary32 bits in the i32 slot. */
float poet_attr_f32(int32_t a);

enum {
    POET_KIND_INPUT = 0,
    POET_KIND_FORWARD = 1,
    POET_KIND_LOSS = 2,
    POET_KIND_BACKWARD = 3,
    POET_KIND_OPTIMIZER = 4
};

/* One node record, decoded. The model does not keep a table of these: the records are read from
 * the blob in place (poet_node_view) into a stack copy when a node runs or is validated. */
typedef struct {
    uint8_t op;
    uint8_t kind;
    uint8_t n_deps;
    uint16_t deps[4]; /* 0xFFFF past n_deps */
    uint32_t bytes;
    int32_t a[POET_N_ATTRS];
} poet_node_t;

/* What the runtime keeps of a parsed model: header fields and the tables (in the pool, sized by
 * poet_model_table_bytes) of what cannot be read back from the blob cheaply. */
typedef struct {
    /* The validated blob, read in place (in nv storage on a board). It must stay unchanged while
     * the model is in use: protocol.c drops the model as soon as a new model upload begins. */
    const uint8_t *blob;
    const uint8_t *recs; /* first node record in blob */
    uint16_t n_nodes;
    uint16_t n_params;
    uint16_t batch;
    uint32_t x_elems;
    /* The staged inputs' bytes: 4 x_elems (fp32), or x_elems when the input node stages them int8
     * (a static-int8 first layer: the host quantises with the input's fixed scale). */
    uint32_t x_bytes;
    /* param p's element offset: in the trained params area (and the gradients at the same
     * offset) for a trained one, in the same area past the trained ones for a state one; its word
     * offset in the frozen weights blob for a frozen one, in the aux weights for an aux one */
    uint32_t *param_off;
    uint32_t frozen_words;               /* 4-byte words of frozen parameters (the frozen weights blob) */
    uint32_t aux_words;                  /* 4-byte words of those on aux storage (POET_PARAM_AUX) */
    uint32_t aux_at;                     /* their first byte on aux storage: past the swap area, 512-aligned */
    /* The pool's stream buffer: the largest output row's weights (a conv2d_q's C/groups k k bytes, a
     * linear's in) of any node that streams its weight from aux storage; 0 when none does. */
    uint32_t stream_bytes;
    uint32_t train_elems;                /* elements with a gradient (and optimizer state) */
    uint32_t state_elems;                /* elements in RAM without one (POET_PARAM_STATE), after them */
    uint8_t opt;                         /* POET_OPT_* (kernels.h), from the optimizer node */
    uint8_t opt_words;                   /* optimizer state words per trained element: 0, 1, 2 */
    float opt_p[3];                      /* the optimizer node's a1..a3: momentum, or Adam's settings */
    /* The optimizer node's a4: every trained parameter is updated by the one backward node that
     * makes its gradient, as it finishes each element, so the pool holds no gradients (docs/spec.md
     * section 6) and the optimizer node only counts the step. */
    uint8_t in_backward;
    uint32_t *swap_off;                  /* byte offset of node i in aux storage */
    uint32_t *arena_off;                 /* node i's arena offset while a schedule runs or is validated */
    uint8_t *flags;                      /* the schedule validator's per-node state */
    uint32_t min_classes;                /* smallest class count of any loss node (label check) */
    uint64_t hash;
} poet_model_t;

/* Readers of single fields, for the hot paths that need one field of many nodes (dep sizes, the
 * schedule validator's overlap scan) and should not decode whole records. */
static inline const uint8_t *poet_node_rec(const poet_model_t *m, uint16_t i)
{
    return m->recs + POET_NODE_SZ * (uint32_t)i;
}
static inline uint8_t poet_node_op(const poet_model_t *m, uint16_t i) { return poet_node_rec(m, i)[0]; }
static inline uint8_t poet_node_kind(const poet_model_t *m, uint16_t i) { return poet_node_rec(m, i)[1]; }
static inline uint32_t poet_node_bytes(const poet_model_t *m, uint16_t i)
{
    return poet_rd32(poet_node_rec(m, i) + 12);
}
/* The bytes node i takes in the arena when a schedule makes it resident: its output's, but none for
 * an input node, whose tensor is the staged batch itself (docs/spec.md section 1): read in place,
 * never allocated, paged or freed, valid for the whole step. */
static inline uint32_t poet_arena_bytes(const poet_model_t *m, uint16_t i)
{
    return poet_node_kind(m, i) == POET_KIND_INPUT ? 0u : poet_node_bytes(m, i);
}
static inline uint32_t poet_param_elems(const poet_model_t *m, uint16_t p)
{
    return poet_rd32(m->blob + POET_MODEL_HDR + 4u * p) & POET_PARAM_ELEMS_MASK;
}
static inline int poet_param_frozen(const poet_model_t *m, uint16_t p)
{
    return (poet_rd32(m->blob + POET_MODEL_HDR + 4u * p) & POET_PARAM_FROZEN) != 0;
}
static inline int poet_param_i8(const poet_model_t *m, uint16_t p)
{
    return (poet_rd32(m->blob + POET_MODEL_HDR + 4u * p) & POET_PARAM_I8) != 0;
}
static inline int poet_param_aux(const poet_model_t *m, uint16_t p)
{
    return (poet_rd32(m->blob + POET_MODEL_HDR + 4u * p) & POET_PARAM_AUX) != 0;
}
/* Whether p is trained: it has a gradient (neither frozen nor state). */
static inline int poet_param_trained(const poet_model_t *m, uint16_t p)
{
    return (poet_rd32(m->blob + POET_MODEL_HDR + 4u * p) & (POET_PARAM_FROZEN | POET_PARAM_STATE)) == 0;
}

/* Decode node i's record from the blob into *n. i must be < m->n_nodes. */
void poet_node_view(const poet_model_t *m, uint16_t i, poet_node_t *n);

/* The table bytes (a multiple of 8) the model of this blob needs, from its header alone; 0 when
 * the header is no model's. */
uint32_t poet_model_table_bytes(const uint8_t *blob, uint32_t len);

/* Parse and validate a model blob, with tables = poet_model_table_bytes(blob, len) bytes,
 * 4-aligned. Returns POET_OK or POET_E_MODEL with *detail = the offending node index (0xFFFFFFFF
 * for header and param-table errors). */
int poet_model_parse(const uint8_t *blob, uint32_t len, void *tables, poet_model_t *m, uint32_t *detail);

#endif
