/* Instructions per kernel call on an emulated core: the Cortex-M4F (QEMU mps2-an386), the Cortex-M0+
 * build (mps2-an385, ARMv6-M soft-float code on QEMU's M3, as the MKR1000 stand-in runs) and RV32IMC
 * (virt, as the ESP32-C3 stand-in). Under -icount shift=0 QEMU retires one instruction per virtual ns;
 * the MPS2 CMSDK timer ticks at 25 MHz (40 instructions a tick), the virt CLINT's mtime at 10 MHz (100).
 * Each kernel runs on the shapes of the zoo's small models, the optimised kernel beside its reference
 * (kernels/reference/), and each line says: kernel, shape, multiply-adds, instructions per call.
 * benchmarks/kernels_peer.py builds these images, runs them and prints the tables (docs/benchmarks.md). */
#include <stdint.h>
#include <string.h>

#include "../core/kernels/kernels.h"
#include "../core/kernels/reference/reference.h"
#include "peers.h"

#define REG(a) (*(volatile uint32_t *)(a))
#define MIN_INSTR 1000000u /* per measurement: a tick is then at most 0.01% */

#if defined(__riscv)
#include "../ports/shared/semihost.h" /* port_semihost: ports/qemu-rv32/startup.S */
#define INSTR_PER_TICK 100u
static uint32_t ticks(void) { return REG(0x0200BFF8u); } /* CLINT mtime, low word */

static void semihost(uint32_t op, const void *arg) { port_semihost(op, (void *)(uintptr_t)arg); }

/* startup.S points mtvec here: any trap ends the run. */
__attribute__((interrupt("machine"), aligned(4))) void trap_handler(void);
void trap_handler(void)
{
    semihost(SEMIHOST_SYS_EXIT, (const void *)(uintptr_t)0x20023u); /* ADP_Stopped_RunTimeErrorUnknown */
    for (;;)
        __asm__ volatile("wfi");
}
#else
#include "../ports/shared/cm_reset.h"
#define TIMER_CTRL REG(0x40000000u)
#define TIMER_VALUE REG(0x40000004u)
#define TIMER_RELOAD REG(0x40000008u)
#define INSTR_PER_TICK 40u
static uint32_t ticks(void) { return 0xFFFFFFFFu - TIMER_VALUE; }

extern uint32_t __stack_top;
void Reset_Handler(void);
void Fault_Handler(void);
void Default_Handler(void);

static void semihost(uint32_t op, const void *arg)
{
    register uint32_t r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
}

void Fault_Handler(void)
{
    semihost(0x18u, (const void *)(uintptr_t)0x20023u); /* SYS_EXIT, ADP_Stopped_RunTimeErrorUnknown */
    for (;;)
        __asm__ volatile("wfi");
}

void Default_Handler(void) { Fault_Handler(); }

__attribute__((section(".vectors"), used)) static void (*const vectors[16])(void) = {
    (void (*)(void))(uintptr_t)&__stack_top, Reset_Handler, Fault_Handler, Fault_Handler, Fault_Handler,
    Fault_Handler, Fault_Handler, 0, 0, 0, 0, Default_Handler, Default_Handler, 0, Default_Handler,
    Default_Handler,
};

void Reset_Handler(void)
{
#if defined(__ARM_FP)
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20; /* CPACR: CP10, CP11 full access */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    cm_start();
}
#endif

static void say(const char *s) { semihost(0x04u, s); } /* SYS_WRITE0 */

static char *put_u(char *p, uint32_t v)
{
    char tmp[10];
    int n = 0;
    do
        tmp[n++] = (char)('0' + v % 10u);
    while (v /= 10u);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static char *put_s(char *p, const char *s)
{
    while (*s)
        *p++ = *s++;
    return p;
}

/* Big enough for the largest shape below. BIAS is every forward kernel's bias; Y, DW and DB are the outputs. */
static float X[16 * 256], W[256 * 64], G[8192], BIAS[256], Y[8192], DW[256 * 64], DB[256];
static const float Y_SCALE = 0.37f; /* the int8 convolution's output scale */
static poet_grad_t gw = {DW, 0, 0, 0, 0}, gb = {DB, 0, 0, 0, 0};

static void fill(float *p, uint32_t n, uint32_t seed)
{
    uint32_t i;
    for (i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(int32_t)(seed >> 8) / 8388608.0f - 1.0f;
    }
}

typedef struct {
    int B, in, out;
} shape_t;

static shape_t S; /* the shape the case functions read */

static void lin_fwd(void) { poet_linear_fwd(S.B, S.in, S.out, X, W, BIAS, Y); }
static void lin_fwd_ref(void) { poet_ref_linear_fwd(S.B, S.in, S.out, X, W, BIAS, Y); }
static void lin_gx(void) { poet_linear_bwd(S.B, S.in, S.out, G, X, W, 0, 0, Y); }
static void lin_gx_ref(void) { poet_ref_linear_bwd(S.B, S.in, S.out, G, X, W, 0, 0, Y); }
static void lin_dw(void) { poet_linear_bwd(S.B, S.in, S.out, G, X, W, &gw, &gb, 0); }
static void lin_dw_ref(void) { poet_ref_linear_bwd(S.B, S.in, S.out, G, X, W, &gw, &gb, 0); }
static void mm_fwd(void) { poet_matmul_fwd(1, S.B, S.in, S.out, X, W, Y); }
static void mm_fwd_ref(void) { poet_ref_matmul_fwd(1, S.B, S.in, S.out, X, W, Y); }

static void li8_fwd(void)
{
    poet_linear_i8_fwd(S.B, S.in, S.out, (const int8_t *)X, 0.02f, (const int8_t *)W, 0.01f, BIAS, Y);
}
static void li8_fwd_ref(void)
{
    poet_ref_linear_i8_fwd(S.B, S.in, S.out, (const int8_t *)X, 0.02f, (const int8_t *)W, 0.01f, BIAS, Y);
}
static void lw8_fwd(void) { poet_linear_w8_fwd(S.B, S.in, S.out, 0, S.out, X, (const int8_t *)W, 0.01f, BIAS, Y); }
static void lw8_fwd_ref(void) { poet_ref_linear_w8_fwd(S.B, S.in, S.out, 0, S.out, X, (const int8_t *)W, 0.01f, BIAS, Y); }

/* The peers' versions (peers.h), in the order of PEER_NAMES. */
#define N_PEERS 3
static const char *const PEER_NAMES[N_PEERS] = {"cmsis_dsp", "cmsis_nn", "aifes"};
typedef int (*peer_fn)(void);

#ifdef POET_PEER_CMSIS_DSP
static int lin_fwd_dsp(void) { return peer_linear_fwd(S.B, S.in, S.out, X, W, BIAS, Y), 0; }
static int lin_gx_dsp(void) { return peer_linear_gx(S.B, S.in, S.out, G, W, Y), 0; }
static int lin_dw_dsp(void) { return peer_linear_dw(S.B, S.in, S.out, G, X, DW), 0; }
static int mm_fwd_dsp(void) { return peer_matmul_fwd(S.B, S.in, S.out, X, W, Y), 0; }
#define DSP(f) f
#else
#define DSP(f) 0
#endif

#ifdef POET_PEER_CMSIS_NN
static int lin_fwd_nn(void) { return peer_nn_linear_fwd(S.B, S.in, S.out, X, W, BIAS, Y); }
static int mm_fwd_nn(void) { return peer_nn_matmul_fwd(S.B, S.in, S.out, X, W, Y); }
static int li8_fwd_nn(void)
{
    return peer_nn_linear_s8_fwd(S.B, S.in, S.out, (const int8_t *)X, (const int8_t *)W, (int8_t *)Y);
}
#define NN(f) f
#else
#define NN(f) 0
#endif

#ifdef POET_PEER_AIFES
static int lin_fwd_aifes(void) { return peer_aifes_linear_fwd(S.B, S.in, S.out, X, W, BIAS, Y); }
static int lin_gx_aifes(void) { return peer_aifes_linear_gx(S.B, S.in, S.out, G, W, Y); }
static int lin_dw_aifes(void) { return peer_aifes_linear_dw(S.B, S.in, S.out, G, X, DW, DB); }
static int mm_fwd_aifes(void) { return peer_aifes_matmul_fwd(S.B, S.in, S.out, X, W, Y); }
#define AIFES(f) f
#else
#define AIFES(f) 0
#endif

typedef struct {
    const char *name;
    void (*run)(void);
    void (*ref)(void);
    peer_fn peer[N_PEERS];
} case_t;

static const case_t CASES[] = {
    {"linear_fwd", lin_fwd, lin_fwd_ref, {DSP(lin_fwd_dsp), NN(lin_fwd_nn), AIFES(lin_fwd_aifes)}},
    {"linear_grad_input", lin_gx, lin_gx_ref, {DSP(lin_gx_dsp), 0, AIFES(lin_gx_aifes)}},
    {"linear_dw_db", lin_dw, lin_dw_ref, {DSP(lin_dw_dsp), 0, AIFES(lin_dw_aifes)}},
    {"matmul_fwd", mm_fwd, mm_fwd_ref, {DSP(mm_fwd_dsp), NN(mm_fwd_nn), AIFES(mm_fwd_aifes)}},
    {"linear_i8_fwd", li8_fwd, li8_fwd_ref, {0, NN(li8_fwd_nn), 0}},
    {"linear_w8_fwd", lw8_fwd, lw8_fwd_ref, {0, 0, 0}},
};

/* int8 quantisation of a tensor (the casts of a plan's int8 layers): every rounding case, halves and
 * saturation and inf and NaN included, then the random fill's values. */
static int QN;
static float QX[8192];
static void quant(void) { poet_quantize_i8(QN, 1.0f, QX, (int8_t *)Y); }
static void quant_ref(void) { poet_ref_quantize_i8(QN, 1.0f, QX, (int8_t *)Y); }
static const case_t QUANT = {"quantize_i8", quant, quant_ref, {0, 0, 0}};

static void quant_fill(void)
{
    union {
        uint32_t u;
        float f;
    } special[] = {{0x7F800000u}, {0xFF800000u}, {0x7FC00000u}, {0x00000001u}, {0x80000000u}};
    int i;
    for (i = 0; i < 1024; i++) /* -128 .. 127.75 in quarters: exact halves, and past the saturation */
        QX[i] = (float)(i - 512) * 0.25f;
    for (i = 0; i < 5; i++)
        QX[1024 + i] = special[i].f;
    for (i = 1029; i < 8192; i++)
        QX[i] = G[i] * 200.0f;
}

static const shape_t SHAPES[] = {{16, 64, 32}, {16, 32, 10}, {1, 64, 32}, {16, 256, 64}, {4, 30, 7}};

/* Convolutions: cnn-digits' (8x8 digits, 3x3, 1 -> 8 channels, padding 1), an ordinary 3x3 layer, a
 * depthwise and a pointwise (1x1) one of a small MobileNet on 16x16 maps. */
static poet_conv_t CV;
static const poet_conv_t CONVS[] = {
    {16, 1, 8, 8, 8, 3, 3, 1, 1, 1, 1, 0, 1},
    {1, 16, 16, 16, 16, 3, 3, 1, 1, 1, 1, 0, 1},
    {1, 16, 16, 16, 16, 3, 3, 1, 1, 1, 16, 0, 1},
    {1, 16, 16, 16, 32, 1, 1, 1, 0, 0, 1, 0, 0},
};

static void cv_fwd(void) { poet_conv2d_ex_fwd(&CV, X, W, BIAS, Y); }
static void cv_fwd_ref(void) { poet_ref_conv2d_ex_fwd(&CV, X, W, BIAS, Y); }
static void cv_gx(void) { poet_conv2d_ex_bwd(&CV, G, X, W, 0, 0, Y); }
static void cv_gx_ref(void) { poet_ref_conv2d_ex_bwd(&CV, G, X, W, 0, 0, Y); }
static void cv_dw(void) { poet_conv2d_ex_bwd(&CV, G, X, W, &gw, &gb, 0); }
static void cv_dw_ref(void) { poet_ref_conv2d_ex_bwd(&CV, G, X, W, &gw, &gb, 0); }

/* The static-int8 convolution (a frozen layer of a plan's int8 prefix), int8 in and out; ReLU after all
 * but the 1x1 (a MobileNet's projection has none), so both epilogues are checked. */
static void cq_fwd(void)
{
    poet_conv2d_q_fwd_rows(&CV, 0, CV.O, (const int8_t *)X, 0.02f, (const int8_t *)W, 0.01f, BIAS, CV.kh != 1,
                           &Y_SCALE, Y);
}
static void cq_fwd_ref(void)
{
    poet_ref_conv2d_q_fwd_rows(&CV, 0, CV.O, (const int8_t *)X, 0.02f, (const int8_t *)W, 0.01f, BIAS, CV.kh != 1,
                               &Y_SCALE, Y);
}

#ifdef POET_PEER_CMSIS_NN
static int cv_fwd_nn(void) { return peer_nn_conv2d_fwd(&CV, X, W, BIAS, Y); }
static int cq_fwd_nn(void) { return peer_nn_conv2d_s8_fwd(&CV, (const int8_t *)X, (const int8_t *)W, (int8_t *)Y); }
#endif

#ifdef POET_PEER_AIFES
static int cv_fwd_aifes(void) { return peer_aifes_conv2d(0, &CV, X, W, BIAS, G, Y, DW, DB); }
static int cv_gx_aifes(void) { return peer_aifes_conv2d(1, &CV, X, W, BIAS, G, Y, DW, DB); }
static int cv_dw_aifes(void) { return peer_aifes_conv2d(2, &CV, X, W, BIAS, G, Y, DW, DB); }
#endif

static const case_t CONV_CASES[] = {
    {"conv2d_fwd", cv_fwd, cv_fwd_ref, {0, NN(cv_fwd_nn), AIFES(cv_fwd_aifes)}},
    {"conv2d_grad_input", cv_gx, cv_gx_ref, {0, 0, AIFES(cv_gx_aifes)}},
    {"conv2d_dw_db", cv_dw, cv_dw_ref, {0, 0, AIFES(cv_dw_aifes)}},
    {"conv2d_q_fwd", cq_fwd, cq_fwd_ref, {0, NN(cq_fwd_nn), 0}},
};

/* Whether poet's kernel gives its reference's bits here, on this core's build (the M4F's SIMD paths
 * included, which the host's tests/test_kernels_opt.py cannot run): a hash of every output after each. */
static uint32_t outputs_after(void (*run)(void))
{
    static float *const OUT[] = {Y, DW, DB};
    static const uint32_t LEN[] = {sizeof Y, sizeof DW, sizeof DB};
    uint32_t h = 2166136261u, i, j;
    for (i = 0; i < 3; i++)
        memset(OUT[i], 0, LEN[i]);
    run();
    for (i = 0; i < 3; i++)
        for (j = 0; j < LEN[i]; j++)
            h = (h ^ ((const uint8_t *)OUT[i])[j]) * 16777619u; /* FNV-1a */
    return h;
}

static peer_fn PEER_RUN; /* the peer function instructions() times through peer_call */
static void peer_call(void) { (void)PEER_RUN(); }

/* 2x2 max pooling, forward and backward: cnn-digits' (16 x 8 channels of 8x8), a larger map, and odd sides
 * (a row and a column in no window). Its "MACs" are the input's elements, one comparison each. */
static int PB, PC, PH, PW;
static void mp_fwd(void) { poet_maxpool2d_fwd(PB, PC, PH, PW, G, Y); } /* G holds the largest input */
static void mp_fwd_ref(void) { poet_ref_maxpool2d_fwd(PB, PC, PH, PW, G, Y); }
static void mp_bwd(void) { poet_maxpool2d_bwd(PB, PC, PH, PW, X, G, Y); }
static void mp_bwd_ref(void) { poet_ref_maxpool2d_bwd(PB, PC, PH, PW, X, G, Y); }
#ifdef POET_PEER_CMSIS_NN
static int mp_fwd_nn(void) { return peer_nn_maxpool2d_fwd(PB, PC, PH, PW, G, Y); }
#endif
static const case_t POOL_CASES[] = {
    {"maxpool2d_fwd", mp_fwd, mp_fwd_ref, {0, NN(mp_fwd_nn), 0}},
    {"maxpool2d_bwd", mp_bwd, mp_bwd_ref, {0, 0, 0}},
};
static const int POOLS[][4] = {{16, 8, 8, 8}, {1, 16, 16, 16}, {2, 4, 7, 9}};

static uint32_t instructions(void (*run)(void))
{
    uint32_t reps = 0, t0 = ticks(), t;
    do {
        run();
        reps++;
        t = ticks() - t0;
    } while (t < MIN_INSTR / INSTR_PER_TICK);
    return (uint32_t)(((uint64_t)t * INSTR_PER_TICK + reps / 2) / reps);
}

/* One line: the case's name, its dimensions, multiply-adds and instructions per call of each version. */
static void report(const case_t *k, const char *const *names, const uint32_t *dims, int n, uint32_t macs)
{
    char line[240], *p = line;
    int i;
    p = put_s(p, "poet ");
    p = put_s(p, k->name);
    for (i = 0; i < n; i++) {
        *p++ = ' ';
        p = put_s(p, names[i]);
        *p++ = '=';
        p = put_u(p, dims[i]);
    }
    p = put_s(p, outputs_after(k->run) == outputs_after(k->ref) ? " bits=same" : " bits=DIFF");
    p = put_s(p, " macs=");
    p = put_u(p, macs);
    p = put_s(p, " instr=");
    p = put_u(p, instructions(k->run));
    p = put_s(p, " ref_instr=");
    p = put_u(p, instructions(k->ref));
    for (i = 0; i < N_PEERS; i++) {
        if (!k->peer[i] || k->peer[i]() != 0) /* not in this image, or no such kernel for the shape */
            continue;
        PEER_RUN = k->peer[i];
        *p++ = ' ';
        p = put_s(p, PEER_NAMES[i]);
        *p++ = '=';
        p = put_u(p, instructions(peer_call));
    }
    *p++ = '\n';
    *p = 0;
    say(line);
}

int main(void)
{
    unsigned c, s;
#if !defined(__riscv)
    TIMER_CTRL = 0;
    TIMER_RELOAD = 0xFFFFFFFFu;
    TIMER_VALUE = 0xFFFFFFFFu;
    TIMER_CTRL = 1u;
#endif
    fill(X, sizeof X / sizeof X[0], 1u);
    fill(W, sizeof W / sizeof W[0], 2u);
    fill(G, sizeof G / sizeof G[0], 3u);
    fill(BIAS, sizeof BIAS / sizeof BIAS[0], 4u);
    for (s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        const char *names[] = {"B", "in", "out"};
        uint32_t dims[3];
        S = SHAPES[s];
        dims[0] = (uint32_t)S.B, dims[1] = (uint32_t)S.in, dims[2] = (uint32_t)S.out;
        for (c = 0; c < sizeof CASES / sizeof CASES[0]; c++)
            report(&CASES[c], names, dims, 3, dims[0] * dims[1] * dims[2]);
    }
    for (s = 0; s < sizeof POOLS / sizeof POOLS[0]; s++) {
        const char *names[] = {"B", "C", "H", "W"};
        uint32_t dims[4];
        PB = POOLS[s][0], PC = POOLS[s][1], PH = POOLS[s][2], PW = POOLS[s][3];
        dims[0] = (uint32_t)PB, dims[1] = (uint32_t)PC, dims[2] = (uint32_t)PH, dims[3] = (uint32_t)PW;
        for (c = 0; c < sizeof POOL_CASES / sizeof POOL_CASES[0]; c++)
            report(&POOL_CASES[c], names, dims, 4, dims[0] * dims[1] * dims[2] * dims[3]);
    }
    quant_fill();
    for (QN = 1024; QN <= 8192; QN *= 8) {
        const char *names[] = {"n"};
        uint32_t dims[1];
        dims[0] = (uint32_t)QN;
        report(&QUANT, names, dims, 1, dims[0]); /* one multiply each */
    }
    for (s = 0; s < sizeof CONVS / sizeof CONVS[0]; s++) {
        const char *names[] = {"B", "C", "HW", "O", "k", "groups"};
        uint32_t dims[6], outs;
        CV = CONVS[s];
        dims[0] = (uint32_t)CV.B, dims[1] = (uint32_t)CV.C, dims[2] = (uint32_t)CV.H, dims[3] = (uint32_t)CV.O;
        dims[4] = (uint32_t)CV.kh, dims[5] = (uint32_t)CV.groups;
        outs = (uint32_t)(poet_conv2d_out(CV.H, CV.kh, CV.stride, CV.ph) *
                          poet_conv2d_out(CV.W, CV.kw, CV.stride, CV.pw));
        for (c = 0; c < sizeof CONV_CASES / sizeof CONV_CASES[0]; c++)
            report(&CONV_CASES[c], names, dims, 6,
                   (uint32_t)CV.B * (uint32_t)CV.O * outs * (uint32_t)(CV.C / CV.groups * CV.kh * CV.kw));
    }
#ifdef POET_PEER_AIFES
    /* a whole training step (the multiply-adds are poet's count for mlp-digits: forward, the weight
     * gradients, the input gradients of all but the first layer; benchmarks/runtime_overhead.py) */
    if (peer_aifes_train_step() == 0) {
        char line[80], *p = line;
        PEER_RUN = peer_aifes_train_step;
        p = put_s(p, "step mlp_digits B=16 macs=179200 aifes=");
        p = put_u(p, instructions(peer_call));
        *p++ = '\n';
        *p = 0;
        say(line);
    }
#endif
    semihost(0x18u, (const void *)(uintptr_t)0x20026u); /* SYS_EXIT, ADP_Stopped_ApplicationExit */
    return 0;
}
