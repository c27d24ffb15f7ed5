/* The op table: every op of the runtime, one row each, the only place an opcode's number is written
 * in C. model.h makes the POET_OP_<NAME> enum of it, ops.h and ops.c the declarations and the lookup
 * by opcode; the host's op table is tested against these rows, so a row stays on one line and no
 * other line of this file opens a row. It includes nothing, so that model.h (which needs only the
 * numbers) and the ops (which need the functions) both read it without including each other.
 *
 * Columns, in order: NAME (POET_OP_<NAME>), NUMBER (the opcode in a node record's byte 0: blobs,
 * fuzz seeds and schedules carry these numbers, so a number is never reused or changed), KIND (a
 * node's kind must be POET_KIND_<KIND>), FLAG (POET_OPF_<FLAG> in ops.h), NATTRS (the attribute
 * slots a0.. the op reads; every slot from NATTRS up must be 0, docs/spec.md section 2), the check
 * and the run (in the family file named by the comment above the row). A check may serve several
 * ops of its family, telling them apart by n->op only where they differ; relu, tanh, sigmoid and the
 * reshapes share ops.c's op_same_check. */
#ifndef POET_OPTABLE_H
#define POET_OPTABLE_H

#define POET_OP_TABLE(X) \
    X(INPUT, 0, INPUT, NONE, 3, op_input_check, op_input_run) \
    /* elementwise.c */ \
    X(RELU, 3, FORWARD, INPLACE, 1, op_same_check, op_relu_run) \
    X(RELU_BWD, 18, BACKWARD, INPLACE, 1, op_pointwise_bwd_check, op_relu_bwd_run) \
    X(TANH, 10, FORWARD, NONE, 1, op_same_check, op_tanh_run) \
    X(TANH_BWD, 25, BACKWARD, NONE, 1, op_pointwise_bwd_check, op_tanh_bwd_run) \
    X(SIGMOID, 11, FORWARD, NONE, 1, op_same_check, op_sigmoid_run) \
    X(SIGMOID_BWD, 26, BACKWARD, NONE, 1, op_pointwise_bwd_check, op_sigmoid_bwd_run) \
    X(SILU, 79, FORWARD, NONE, 1, op_same_check, op_silu_run) \
    X(SILU_BWD, 80, BACKWARD, NONE, 1, op_pointwise_bwd_check, op_silu_bwd_run) \
    X(HARDSWISH, 81, FORWARD, NONE, 1, op_same_check, op_hardswish_run) \
    X(HARDSWISH_BWD, 82, BACKWARD, NONE, 1, op_pointwise_bwd_check, op_hardswish_bwd_run) \
    X(HARDSIGMOID, 83, FORWARD, NONE, 1, op_same_check, op_hardsigmoid_run) \
    X(HARDSIGMOID_BWD, 84, BACKWARD, NONE, 1, op_pointwise_bwd_check, op_hardsigmoid_bwd_run) \
    X(GELU, 12, FORWARD, NONE, 2, op_gelu_check, op_gelu_run) \
    X(GELU_BWD, 27, BACKWARD, NONE, 2, op_gelu_bwd_check, op_gelu_bwd_run) \
    X(HARDTANH, 13, FORWARD, INPLACE, 3, op_two_floats_check, op_hardtanh_run) \
    X(HARDTANH_BWD, 28, BACKWARD, INPLACE, 3, op_hardtanh_bwd_check, op_hardtanh_bwd_run) \
    X(ACT_MASK, 102, FORWARD, NONE, 4, op_act_mask_check, op_act_mask_run) \
    X(MASK_BWD, 103, BACKWARD, NARROW_INPLACE, 1, op_mask_bwd_check, op_mask_bwd_run) \
    X(ADD, 40, FORWARD, GRAD_SUM, 3, op_add_check, op_add_run) \
    X(ADD_BWD, 56, BACKWARD, NONE, 3, op_add_bwd_check, op_add_bwd_run) \
    X(SUB, 41, FORWARD, NONE, 3, op_add_check, op_sub_run) \
    X(SUB_BWD, 57, BACKWARD, NONE, 3, op_add_bwd_check, op_sub_bwd_run) \
    X(MUL, 42, FORWARD, NONE, 3, op_add_check, op_mul_run) \
    X(MUL_BWD_A, 58, BACKWARD, NONE, 3, op_mul_bwd_check, op_mul_bwd_a_run) \
    X(MUL_BWD_B, 59, BACKWARD, NONE, 3, op_mul_bwd_check, op_mul_bwd_b_run) \
    X(SCALE, 43, FORWARD, NONE, 3, op_two_floats_check, op_scale_run) \
    X(SCALE_BWD, 60, BACKWARD, NONE, 3, op_two_floats_check, op_scale_bwd_run) \
    /* linear.c */ \
    X(LINEAR, 1, FORWARD, NONE, 5, op_linear_check, op_linear_run) \
    X(LINEAR_BWD, 16, BACKWARD, NONE, 6, op_linear_check, op_linear_bwd_run) \
    X(LINEAR_I8, 51, FORWARD, NARROW, 5, op_linear_check, op_linear_i8_run) \
    X(MATMUL, 44, FORWARD, NONE, 4, op_matmul_check, op_matmul_run) \
    X(MATMUL_BWD_A, 61, BACKWARD, NONE, 4, op_matmul_check, op_matmul_bwd_a_run) \
    X(MATMUL_BWD_B, 62, BACKWARD, NONE, 4, op_matmul_check, op_matmul_bwd_b_run) \
    /* conv.c */ \
    X(CONV2D, 2, FORWARD, INPLACE, 10, op_conv2d_check, op_conv2d_run) \
    X(CONV2D_BWD, 17, BACKWARD, INPLACE, 10, op_conv2d_check, op_conv2d_bwd_run) \
    X(CONV2D_I8, 52, FORWARD, NARROW, 9, op_conv2d_check, op_conv2d_i8_run) \
    /* pool.c */ \
    X(MAXPOOL2D, 4, FORWARD, NONE, 4, op_maxpool2d_check, op_maxpool2d_run) \
    X(MAXPOOL2D_BWD, 19, BACKWARD, NONE, 4, op_maxpool2d_check, op_maxpool2d_bwd_run) \
    X(MAXPOOL2D_GENERAL, 93, FORWARD, NONE, 8, op_maxpool2d_general_check, op_maxpool2d_general_run) \
    X(MAXPOOL2D_GENERAL_BWD, 94, BACKWARD, NONE, 8, op_maxpool2d_general_check, op_maxpool2d_general_bwd_run) \
    X(AVGPOOL2D, 73, FORWARD, NONE, 8, op_avgpool2d_check, op_avgpool2d_run) \
    X(AVGPOOL2D_BWD, 74, BACKWARD, NONE, 8, op_avgpool2d_check, op_avgpool2d_bwd_run) \
    X(UPSAMPLE, 87, FORWARD, NONE, 6, op_upsample_check, op_upsample_run) \
    X(UPSAMPLE_BWD, 88, BACKWARD, NONE, 6, op_upsample_check, op_upsample_bwd_run) \
    X(DROPOUT, 89, FORWARD, NONE, 5, op_dropout_check, op_dropout_run) \
    X(DROPOUT_BWD, 90, BACKWARD, NONE, 5, op_dropout_check, op_dropout_run) \
    X(MEAN, 14, FORWARD, NONE, 3, op_mean_check, op_mean_run) \
    X(MEAN_BWD, 29, BACKWARD, NONE, 3, op_mean_check, op_mean_bwd_run) \
    /* norm.c */ \
    X(BATCHNORM, 8, FORWARD, NONE, 9, op_batchnorm_check, op_batchnorm_run) \
    X(BATCHNORM_BWD, 23, BACKWARD, NONE, 10, op_batchnorm_check, op_batchnorm_bwd_run) \
    X(BATCHNORM_EVAL, 48, FORWARD, NONE, 9, op_batchnorm_check, op_batchnorm_eval_run) \
    X(BATCHNORM_EVAL_BWD, 66, BACKWARD, NONE, 10, op_batchnorm_check, op_batchnorm_eval_bwd_run) \
    X(BN_RELU_MEAN, 71, FORWARD, NONE, 9, op_bn_relu_mean_check, op_bn_relu_mean_run) \
    X(BN_RELU_MEAN_BWD, 72, BACKWARD, NONE, 10, op_bn_relu_mean_check, op_bn_relu_mean_bwd_run) \
    X(LAYERNORM, 9, FORWARD, NONE, 5, op_layernorm_check, op_layernorm_run) \
    X(LAYERNORM_BWD, 24, BACKWARD, NONE, 6, op_layernorm_check, op_layernorm_bwd_run) \
    X(SOFTMAX, 45, FORWARD, NONE, 2, op_softmax_check, op_softmax_run) \
    X(SOFTMAX_BWD, 63, BACKWARD, NONE, 2, op_softmax_check, op_softmax_bwd_run) \
    X(LOG_SOFTMAX, 91, FORWARD, NONE, 2, op_softmax_check, op_log_softmax_run) \
    X(LOG_SOFTMAX_BWD, 92, BACKWARD, NONE, 2, op_softmax_check, op_log_softmax_bwd_run) \
    /* loss.c */ \
    X(CROSS_ENTROPY, 6, LOSS, NONE, 2, op_cross_entropy_check, op_cross_entropy_run) \
    X(CROSS_ENTROPY_BWD, 21, BACKWARD, NONE, 2, op_cross_entropy_check, op_cross_entropy_bwd_run) \
    X(MSE, 75, LOSS, NONE, 1, op_regression_loss_check, op_mse_run) \
    X(MSE_BWD, 76, BACKWARD, NONE, 1, op_regression_loss_check, op_mse_bwd_run) \
    X(L1, 77, LOSS, NONE, 1, op_regression_loss_check, op_l1_run) \
    X(L1_BWD, 78, BACKWARD, NONE, 1, op_regression_loss_check, op_l1_bwd_run) \
    /* layout.c */ \
    X(FLATTEN, 5, FORWARD, NONE, 1, op_same_check, op_copy_run) \
    X(FLATTEN_BWD, 20, BACKWARD, NONE, 1, op_same_check, op_copy_run) \
    X(RESHAPE, 7, FORWARD, NONE, 1, op_same_check, op_copy_run) \
    X(RESHAPE_BWD, 22, BACKWARD, NONE, 1, op_same_check, op_copy_run) \
    X(PERMUTE, 15, FORWARD, NONE, 8, op_permute_check, op_permute_run) \
    X(PERMUTE_BWD, 30, BACKWARD, NONE, 8, op_permute_check, op_permute_bwd_run) \
    X(SELECT, 47, FORWARD, NONE, 4, op_select_check, op_select_run) \
    X(SELECT_BWD, 65, BACKWARD, NONE, 4, op_select_check, op_select_bwd_run) \
    X(CAT, 85, FORWARD, NONE, 5, op_cat_check, op_cat_run) \
    X(CAT_BWD, 86, BACKWARD, NONE, 4, op_cat_check, op_cat_bwd_run) \
    X(SLICE, 95, FORWARD, NONE, 4, op_slice_check, op_cat_bwd_run) \
    X(SLICE_BWD, 96, BACKWARD, NONE, 4, op_slice_check, op_slice_bwd_run) \
    X(EMBEDDING, 46, FORWARD, NONE, 5, op_embedding_check, op_embedding_run) \
    X(EMBEDDING_BWD, 64, BACKWARD, NONE, 6, op_embedding_check, op_embedding_bwd_run) \
    /* cast.c */ \
    X(CAST, 49, FORWARD, NARROW, 4, op_cast_check, op_cast_run) \
    X(ABSMAX, 50, FORWARD, NONE, 2, op_absmax_check, op_absmax_run) \
    /* quant.c */ \
    X(QUANTIZE, 67, FORWARD, NONE, 2, op_quantize_check, op_quantize_run) \
    X(DEQUANTIZE, 68, FORWARD, NARROW, 1, op_dequantize_check, op_dequantize_run) \
    X(CONV2D_Q, 69, FORWARD, NARROW_INPLACE, 10, op_conv2d_q_check, op_conv2d_q_run) \
    X(ADD_Q, 70, FORWARD, NARROW, 2, op_add_q_check, op_add_q_run) \
    X(MAXPOOL2D_Q, 97, FORWARD, NARROW, 9, op_maxpool2d_q_check, op_maxpool2d_q_run) \
    X(MEAN_Q, 98, FORWARD, NARROW, 4, op_mean_q_check, op_mean_q_run) \
    X(MUL_Q, 99, FORWARD, NARROW, 4, op_mul_q_check, op_mul_q_run) \
    X(SLICE_Q, 100, FORWARD, NARROW, 5, op_slice_q_check, op_slice_q_run) \
    X(CAT_Q, 101, FORWARD, NARROW, 6, op_cat_q_check, op_cat_q_run) \
    /* optim.c */ \
    X(SGD, 32, OPTIMIZER, NONE, 5, op_optimizer_check, op_optimizer_run)

#endif
