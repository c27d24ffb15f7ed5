/* The op set (docs/graph.md; node records in docs/spec.md section 2). An op is one place: its
 * family file (ops/<family>.c) holds, side by side, the check that a node record of it is well
 * formed and the run that executes one, and one table (POET_OP_TABLE below) maps every opcode to
 * them. The model parser runs the checks once per upload (model.c), so the runs, called by the
 * interpreter for each compute instruction (interp.c), trust every index and size they compute. */
#ifndef POET_OPS_H
#define POET_OPS_H

#include <stdint.h>

#include "../interp.h"
#include "../model.h"

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
} poet_exec_t;

/* 1 if node n of model m is a valid instance of its op. Called only after the generic checks of
 * poet_op_check, so the node's kind is the op's and its deps point at earlier nodes. */
typedef int (*poet_check_fn)(const poet_model_t *m, const poet_node_t *n);
typedef void (*poet_run_fn)(const poet_exec_t *e);

/* Traits of an op besides its kind; bits above the POET_KIND_* values, which ops.c keeps with them. */
#define POET_OPF_NONE 0x00u
#define POET_OPF_NARROW 0x10u   /* may read tensors that are not fp32 (the low-precision ops) */
#define POET_OPF_GRAD_SUM 0x20u /* also a backward node: the backward pass sums gradients with it */

/* The op table, one row per opcode (POET_OP_<code> in model.h), grouped by family file:
 * X(code, kind, flag, check, run), kind as in POET_KIND_<kind> (a node's kind must be it), flag
 * as in POET_OPF_<flag>. ops.c makes the lookup tables of it and every family file gets its
 * functions' declarations from it, so an op is added here and in its family file, nowhere else.
 * A check may serve several ops of its family (telling them apart by n->op only where they
 * differ); relu, tanh, sigmoid and the reshapes share ops.c's op_same_check. */
#define POET_OP_TABLE(X) \
    X(INPUT, INPUT, NONE, op_input_check, op_input_run) \
    /* elementwise.c */ \
    X(RELU, FORWARD, NONE, op_same_check, op_relu_run) \
    X(RELU_BWD, BACKWARD, NONE, op_pointwise_bwd_check, op_relu_bwd_run) \
    X(TANH, FORWARD, NONE, op_same_check, op_tanh_run) \
    X(TANH_BWD, BACKWARD, NONE, op_pointwise_bwd_check, op_tanh_bwd_run) \
    X(SIGMOID, FORWARD, NONE, op_same_check, op_sigmoid_run) \
    X(SIGMOID_BWD, BACKWARD, NONE, op_pointwise_bwd_check, op_sigmoid_bwd_run) \
    X(SILU, FORWARD, NONE, op_same_check, op_silu_run) \
    X(SILU_BWD, BACKWARD, NONE, op_pointwise_bwd_check, op_silu_bwd_run) \
    X(HARDSWISH, FORWARD, NONE, op_same_check, op_hardswish_run) \
    X(HARDSWISH_BWD, BACKWARD, NONE, op_pointwise_bwd_check, op_hardswish_bwd_run) \
    X(HARDSIGMOID, FORWARD, NONE, op_same_check, op_hardsigmoid_run) \
    X(HARDSIGMOID_BWD, BACKWARD, NONE, op_pointwise_bwd_check, op_hardsigmoid_bwd_run) \
    X(GELU, FORWARD, NONE, op_gelu_check, op_gelu_run) \
    X(GELU_BWD, BACKWARD, NONE, op_gelu_bwd_check, op_gelu_bwd_run) \
    X(HARDTANH, FORWARD, NONE, op_two_floats_check, op_hardtanh_run) \
    X(HARDTANH_BWD, BACKWARD, NONE, op_hardtanh_bwd_check, op_hardtanh_bwd_run) \
    X(ADD, FORWARD, GRAD_SUM, op_add_check, op_add_run) \
    X(ADD_BWD, BACKWARD, NONE, op_add_bwd_check, op_add_bwd_run) \
    X(SUB, FORWARD, NONE, op_add_check, op_sub_run) \
    X(SUB_BWD, BACKWARD, NONE, op_add_bwd_check, op_sub_bwd_run) \
    X(MUL, FORWARD, NONE, op_mul_check, op_mul_run) \
    X(MUL_BWD_A, BACKWARD, NONE, op_mul_bwd_check, op_mul_bwd_run) \
    X(MUL_BWD_B, BACKWARD, NONE, op_mul_bwd_check, op_mul_bwd_run) \
    X(SCALE, FORWARD, NONE, op_two_floats_check, op_scale_run) \
    X(SCALE_BWD, BACKWARD, NONE, op_two_floats_check, op_scale_bwd_run) \
    /* linear.c */ \
    X(LINEAR, FORWARD, NONE, op_linear_check, op_linear_run) \
    X(LINEAR_BWD, BACKWARD, NONE, op_linear_check, op_linear_bwd_run) \
    X(LINEAR_I8, FORWARD, NARROW, op_linear_check, op_linear_i8_run) \
    X(MATMUL, FORWARD, NONE, op_matmul_check, op_matmul_run) \
    X(MATMUL_BWD_A, BACKWARD, NONE, op_matmul_check, op_matmul_bwd_a_run) \
    X(MATMUL_BWD_B, BACKWARD, NONE, op_matmul_check, op_matmul_bwd_b_run) \
    /* conv.c */ \
    X(CONV2D, FORWARD, NONE, op_conv2d_check, op_conv2d_run) \
    X(CONV2D_BWD, BACKWARD, NONE, op_conv2d_check, op_conv2d_bwd_run) \
    X(CONV2D_I8, FORWARD, NARROW, op_conv2d_check, op_conv2d_i8_run) \
    /* pool.c */ \
    X(MAXPOOL2D, FORWARD, NONE, op_maxpool2d_check, op_maxpool2d_run) \
    X(MAXPOOL2D_BWD, BACKWARD, NONE, op_maxpool2d_check, op_maxpool2d_bwd_run) \
    X(AVGPOOL2D, FORWARD, NONE, op_avgpool2d_check, op_avgpool2d_run) \
    X(AVGPOOL2D_BWD, BACKWARD, NONE, op_avgpool2d_check, op_avgpool2d_bwd_run) \
    X(UPSAMPLE, FORWARD, NONE, op_upsample_check, op_upsample_run) \
    X(UPSAMPLE_BWD, BACKWARD, NONE, op_upsample_check, op_upsample_bwd_run) \
    X(DROPOUT, FORWARD, NONE, op_dropout_check, op_dropout_run) \
    X(DROPOUT_BWD, BACKWARD, NONE, op_dropout_check, op_dropout_run) \
    X(MEAN, FORWARD, NONE, op_mean_check, op_mean_run) \
    X(MEAN_BWD, BACKWARD, NONE, op_mean_check, op_mean_bwd_run) \
    /* norm.c */ \
    X(BATCHNORM, FORWARD, NONE, op_batchnorm_check, op_batchnorm_run) \
    X(BATCHNORM_BWD, BACKWARD, NONE, op_batchnorm_check, op_batchnorm_bwd_run) \
    X(BATCHNORM_EVAL, FORWARD, NONE, op_batchnorm_check, op_batchnorm_eval_run) \
    X(BATCHNORM_EVAL_BWD, BACKWARD, NONE, op_batchnorm_check, op_batchnorm_eval_bwd_run) \
    X(BN_RELU_MEAN, FORWARD, NONE, op_bn_relu_mean_check, op_bn_relu_mean_run) \
    X(BN_RELU_MEAN_BWD, BACKWARD, NONE, op_bn_relu_mean_check, op_bn_relu_mean_bwd_run) \
    X(LAYERNORM, FORWARD, NONE, op_layernorm_check, op_layernorm_run) \
    X(LAYERNORM_BWD, BACKWARD, NONE, op_layernorm_check, op_layernorm_bwd_run) \
    X(SOFTMAX, FORWARD, NONE, op_softmax_check, op_softmax_run) \
    X(SOFTMAX_BWD, BACKWARD, NONE, op_softmax_check, op_softmax_bwd_run) \
    /* loss.c */ \
    X(CROSS_ENTROPY, LOSS, NONE, op_cross_entropy_check, op_cross_entropy_run) \
    X(CROSS_ENTROPY_BWD, BACKWARD, NONE, op_cross_entropy_check, op_cross_entropy_bwd_run) \
    X(MSE, LOSS, NONE, op_regression_loss_check, op_mse_run) \
    X(MSE_BWD, BACKWARD, NONE, op_regression_loss_check, op_mse_bwd_run) \
    X(L1, LOSS, NONE, op_regression_loss_check, op_l1_run) \
    X(L1_BWD, BACKWARD, NONE, op_regression_loss_check, op_l1_bwd_run) \
    /* layout.c */ \
    X(FLATTEN, FORWARD, NONE, op_same_check, op_copy_run) \
    X(FLATTEN_BWD, BACKWARD, NONE, op_same_check, op_copy_run) \
    X(RESHAPE, FORWARD, NONE, op_same_check, op_copy_run) \
    X(RESHAPE_BWD, BACKWARD, NONE, op_same_check, op_copy_run) \
    X(PERMUTE, FORWARD, NONE, op_permute_check, op_permute_run) \
    X(PERMUTE_BWD, BACKWARD, NONE, op_permute_check, op_permute_bwd_run) \
    X(SELECT, FORWARD, NONE, op_select_check, op_select_run) \
    X(SELECT_BWD, BACKWARD, NONE, op_select_check, op_select_bwd_run) \
    X(CAT, FORWARD, NONE, op_cat_check, op_cat_run) \
    X(CAT_BWD, BACKWARD, NONE, op_cat_check, op_cat_bwd_run) \
    X(EMBEDDING, FORWARD, NONE, op_embedding_check, op_embedding_run) \
    X(EMBEDDING_BWD, BACKWARD, NONE, op_embedding_check, op_embedding_bwd_run) \
    /* cast.c */ \
    X(CAST, FORWARD, NARROW, op_cast_check, op_cast_run) \
    X(ABSMAX, FORWARD, NONE, op_absmax_check, op_absmax_run) \
    /* quant.c */ \
    X(QUANTIZE, FORWARD, NONE, op_quantize_check, op_quantize_run) \
    X(DEQUANTIZE, FORWARD, NARROW, op_dequantize_check, op_dequantize_run) \
    X(CONV2D_Q, FORWARD, NARROW, op_conv2d_q_check, op_conv2d_q_run) \
    X(ADD_Q, FORWARD, NARROW, op_add_q_check, op_add_q_run) \
    /* optim.c */ \
    X(SGD, OPTIMIZER, NONE, op_optimizer_check, op_optimizer_run)

#define POET_OP_DECLARE(code, kind, flag, check, run) \
    int check(const poet_model_t *m, const poet_node_t *n); \
    void run(const poet_exec_t *e);
POET_OP_TABLE(POET_OP_DECLARE)

typedef struct {
    poet_check_fn check; /* NULL: no op has this opcode */
    poet_run_fn run;
} poet_op_t;

/* Indexed by opcode: the highest is POET_OP_DROPOUT_BWD. */
#define POET_N_OPCODES 91u
extern const poet_op_t poet_ops[POET_N_OPCODES];

/* The whole check of node i of m (decoded as n): its opcode, kind, input types and place, then
 * the op's own check. 1 if valid. */
int poet_op_check(const poet_model_t *m, const poet_node_t *n, uint32_t i);

#endif
