/* Model blob (PMDL, docs/spec.md section 2): parse, validate and hash. */
#ifndef POET_MODEL_H
#define POET_MODEL_H

#include <stdint.h>

#define POET_MODEL_BLOB_MAX 4096u
#define POET_MAX_NODES 72u  /* (4096 - 16) / 56 */
#define POET_MAX_PARAMS 64u

enum {
    POET_OP_INPUT = 0,
    POET_OP_LINEAR = 1,
    POET_OP_CONV2D = 2,
    POET_OP_RELU = 3,
    POET_OP_MAXPOOL2D = 4,
    POET_OP_FLATTEN = 5,
    POET_OP_CROSS_ENTROPY = 6,
    POET_OP_LINEAR_BWD = 16,
    POET_OP_CONV2D_BWD = 17,
    POET_OP_RELU_BWD = 18,
    POET_OP_MAXPOOL2D_BWD = 19,
    POET_OP_FLATTEN_BWD = 20,
    POET_OP_CROSS_ENTROPY_BWD = 21,
    POET_OP_SGD = 32
};

enum {
    POET_KIND_INPUT = 0,
    POET_KIND_FORWARD = 1,
    POET_KIND_LOSS = 2,
    POET_KIND_BACKWARD = 3,
    POET_KIND_OPTIMIZER = 4
};

typedef struct {
    uint8_t op;
    uint8_t kind;
    uint8_t n_deps;
    uint16_t deps[4];
    uint32_t bytes;
    int32_t a[10];
} poet_node_t;

typedef struct {
    uint16_t n_nodes;
    uint16_t n_params;
    uint16_t batch;
    uint32_t x_elems;
    uint32_t param_elems[POET_MAX_PARAMS];
    uint32_t param_off[POET_MAX_PARAMS]; /* element offset of param p in the params area */
    uint32_t total_param_elems;
    uint32_t swap_off[POET_MAX_NODES];   /* byte offset of node i in aux storage */
    uint32_t min_classes;                /* smallest class count of any loss node (label check) */
    uint64_t hash;
    poet_node_t nodes[POET_MAX_NODES];
} poet_model_t;

/* Parse and validate a model blob. Returns POET_OK or POET_E_MODEL with *detail = the offending
 * node index (0xFFFFFFFF for header and param-table errors). */
int poet_model_parse(const uint8_t *blob, uint32_t len, poet_model_t *m, uint32_t *detail);

#endif
