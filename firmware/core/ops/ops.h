/* The op set (docs/graph.md; node records in docs/spec.md section 2). An op is one row of the op
 * table (optable.h: its number, kind, traits, attribute count, check and run) and its family file
 * (ops/<family>.c), which holds side by side the check that a node record of it is well formed and
 * the run that executes one. The model parser runs the checks once per upload (model.c, through
 * poet_op_check), so the runs, called by the interpreter for each compute instruction (interp.c),
 * trust every index and size they compute. */
#ifndef POET_OPS_H
#define POET_OPS_H

#include <stdint.h>

#include "../interp.h"
#include "../model.h"
#include "optable.h"

/* What a run reads and writes. Backward nodes read dL/dy as dep 0 and what the forward saved as
 * dep 1. */
typedef struct {
    const poet_model_t *m;
    const poet_buffers_t *buf;
    const int32_t *a;  /* the node's attributes; each family file names their slots */
    float *in[4];      /* dep k's tensor in the arena, NULL for a dep without output */
    const uint16_t *deps; /* the deps' node indices (the static-int8 ops read their inputs' scales) */
    float *out;
    float *loss;       /* where a loss node leaves the step's loss */
    const poet_update_t *upd; /* the step's update rule (learning rate, optimizer, step count) */
    int *err;          /* a run that reads aux storage (a streamed weight) leaves POET_E_PAGER here on failure */
    uint8_t n_deps;
    uint8_t recompute; /* the node runs again (a recompute instruction), not for the first time */
    /* A forward schedule runs (docs/spec.md 5, predict): the model in evaluation mode, as PyTorch's
     * eval(): a batch norm normalises with its running statistics and moves none, a dropout passes
     * its input through. */
    uint8_t eval;
} poet_exec_t;

/* 1 if node n of model m is a valid instance of its op. Called only after the generic checks of
 * poet_op_check, so the node's kind is the op's, its deps point at earlier (validated) nodes and its
 * slots past the op's NATTRS are 0. m is writable for the few ops the model keeps a value of, found
 * only in their nodes: a check that passes folds it into m (the input's staged bytes, a loss's class
 * count, a streamed conv's row, the optimizer's settings). A check writes nothing else, and nothing
 * when it fails. */
typedef int (*poet_check_fn)(poet_model_t *m, const poet_node_t *n);
typedef void (*poet_run_fn)(const poet_exec_t *e);

/* Traits of an op besides its kind; bits above the POET_KIND_* values, which ops.c keeps with them. */
#define POET_OPF_NONE 0x00u
#define POET_OPF_NARROW 0x10u   /* may read tensors that are not fp32 (the low-precision ops) */
#define POET_OPF_GRAD_SUM 0x20u /* also a backward node: the backward pass sums gradients with it */
/* its kernel makes each output element from the same element of its inputs, so a schedule may make its output
 * over its dep 0 (docs/spec.md 1, "In place"; schedule.c checks where) */
#define POET_OPF_INPLACE 0x40u
#define POET_OPF_NARROW_INPLACE (POET_OPF_NARROW | POET_OPF_INPLACE) /* conv2d_q: its depthwise nodes marked so */

#define POET_OP_DECLARE(name, number, kind, flag, nattrs, check, run) \
    int check(poet_model_t *m, const poet_node_t *n); \
    void run(const poet_exec_t *e);
POET_OP_TABLE(POET_OP_DECLARE)

typedef struct {
    poet_check_fn check; /* NULL: no op has this opcode */
    poet_run_fn run;
} poet_op_t;

/* Indexed by opcode: one more than the table's highest NUMBER, computed by the compiler so that
 * adding a row never needs this edited. It is the size of a union of one char[NUMBER + 1] per row: a
 * union is at least as large as its largest member (so every opcode is an index), and a union of
 * char arrays has no padding on any compiler poet is built with (ops.c asserts it fits a u8 op). */
#define POET_OP_SPAN(name, number, kind, flag, nattrs, check, run) char name[(number) + 1];
typedef union {
    POET_OP_TABLE(POET_OP_SPAN)
} poet_op_span_t;
#define POET_N_OPCODES ((uint32_t)sizeof(poet_op_span_t))
extern const poet_op_t poet_ops[POET_N_OPCODES];

/* The whole check of node i of m (decoded as n): its opcode, kind, input types, place and unused
 * attribute slots, then the op's own check, which may fold a value into m (poet_check_fn). 1 if
 * valid. */
int poet_op_check(poet_model_t *m, const poet_node_t *n, uint32_t i);
/* Whether node n's output may be made over its dep 0: its op is POET_OPF_INPLACE, and a conv is marked in place
 * (conv2d_q's and conv2d's a9 bit 19, conv2d_bwd's bit 15: a depthwise one, checked with the model). */
int poet_node_in_place(const poet_node_t *n);

#endif
