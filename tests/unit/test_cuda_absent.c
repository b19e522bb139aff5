/*
 * test_cuda_absent: a build that links the CUDA target behaves on a host
 * without a GPU or driver: the probe reports zero devices, the backend and
 * the NCCL communicator refuse with -GPT_E_NODEVICE (and fill the error
 * detail) instead of crashing, and the CPU backend still works in the same
 * process; cuBLAS is not mapped until the loader is asked for it, which
 * then resolves every function the backend calls. cuDNN's loader: a
 * library that is nowhere fails with its name and every place tried, and
 * maps nothing; the places include a Python environment's nvidia/cudnn
 * folder beside its nvidia/cuda_runtime; where libcudnn.so.9 exists (the
 * CUDA toolkit's lib64 here) the whole table resolves, gptd's device
 * line names its version, and cuDNN itself finalizes every node of the
 * attention graphs (cuda_dnn_attn.c) up to the graph's handle, which
 * needs a GPU. On a host with a GPU, or in a build without CUDA,
 * it exits 77 (skipped): there the gpu tests cover the same ground.
 */
#include <stdio.h>
#include <errno.h>
#include <string.h>

#ifdef GPTD_HAVE_CUDA
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backend.h"
#include "comm.h"
#include "cuda/comm_nccl.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "cuda_blas.h"
#include "cuda_dnn.h"
#include "cuda_dnn_attn.h"

/* Whether a library whose name contains `name` is mapped into this process. */
static int mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, name) != NULL;
    fclose(f);
    return found;
}

/* Every gptd links this backend; cuBLASLt alone costs ~210 MB resident,
 * so it is loaded by the first backend made, never at start. The failed
 * backends above load nothing (no device comes first); the loader then
 * maps it and fills the whole table, and a second call is a no-op. */
static void test_cublas_at_first_use(void **state)
{
    (void)state;
    assert_false(mapped("libcublas"));
    struct gpt_err err;
    memset(&err, 0, sizeof(err));
    assert_int_equal(gpt_cublas_load(&err), 0);
    assert_true(mapped("libcublasLt"));
    void *const *fn = (void *const *)&gpt_cublas;
    for (size_t i = 0; i < sizeof(gpt_cublas) / sizeof(void *); i++)
        assert_non_null(fn[i]);
    assert_int_equal(gpt_cublas_load(NULL), 0);
    assert_string_equal(GPT_CUBLAS(cublasGetStatusString)(CUBLAS_STATUS_SUCCESS), "success");
}

static void test_cudnn_loader(void **state)
{
    (void)state;
    /* where it is looked for past the loader's own search */
    char out[2][4096];
    assert_int_equal(
        gpt_cudnn_candidates("/usr/local/cuda/lib64/libcudart.so.13", "libx.so.9", out, 2), 1);
    assert_string_equal(out[0], "/usr/local/cuda/lib64/libx.so.9");
    const char *wheel =
        "/venv/lib/python3.12/site-packages/nvidia/cuda_runtime/lib/libcudart.so.13";
    assert_int_equal(gpt_cudnn_candidates(wheel, "libx.so.9", out, 2), 2);
    assert_string_equal(out[0],
                        "/venv/lib/python3.12/site-packages/nvidia/cuda_runtime/lib/libx.so.9");
    assert_string_equal(out[1], "/venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libx.so.9");
    assert_int_equal(gpt_cudnn_candidates(wheel, "libx.so.9", out, 1), 1);
    assert_int_equal(gpt_cudnn_candidates("libcudart.so.13", "libx.so.9", out, 2), 0);
    assert_int_equal(gpt_cudnn_candidates(NULL, "libx.so.9", out, 2), 0);

    /* a missing library: an error that names it and where it looked,
     * nothing resolved, nothing mapped */
    assert_false(mapped("libcudnn"));
    struct gpt_cudnn_api api;
    memset(&api, 0xa5, sizeof(api));
    char where[256] = "", why[1024] = "";
    assert_int_equal(
        gpt_cudnn_open("libcudnn_gptd_absent.so.9", &api, where, sizeof(where), why, sizeof(why)),
        -GPT_E_NODEVICE);
    assert_non_null(strstr(why, "cannot load libcudnn_gptd_absent.so.9 (the loader's search"));
    void *const *fn = (void *const *)&api;
    for (size_t i = 0; i < sizeof(api) / sizeof(void *); i++)
        assert_null(fn[i]);
    assert_false(mapped("libcudnn"));

    /* the real one, where this host has it: every function, and a 9.x */
    struct gpt_err err;
    memset(&err, 0, sizeof(err));
    int rc = gpt_cudnn_load(&err);
    if (rc < 0) {
        assert_int_equal(rc, -GPT_E_NODEVICE);
        assert_non_null(strstr(err.msg, GPT_CUDNN_SONAME));
        assert_int_equal(gpt_cuda_cudnn_version(), 0);
        return;
    }
    assert_true(mapped("libcudnn"));
    fn = (void *const *)&gpt_cudnn;
    for (size_t i = 0; i < sizeof(gpt_cudnn) / sizeof(void *); i++)
        assert_non_null(fn[i]);
    assert_true(gpt_cuda_cudnn_version() >= 90000 && gpt_cuda_cudnn_version() < 100000);

    /* The attention graphs against the real library (cuda_dnn_attn.c):
     * with no GPU there is no handle, so the build stops at the graph's
     * handle, after every tensor and operation node (GPT-2's shape, both
     * ways) was finalized by cuDNN itself. */
    for (int bwd = 0; bwd < 2; bwd++) {
        struct gpt_cudnn_sdpa_shape s = {4, 1024, 768, 12, bwd};
        struct gpt_cudnn_sdpa_plan p;
        assert_int_equal(gpt_cudnn_sdpa_build(&gpt_cudnn, NULL, &s, &p, why, sizeof(why)),
                         -ENOTSUP);
        assert_non_null(strstr(why, ": graph handle: status "));
        assert_null(p.plan);
    }
}

static void test_backend_absent(void **state)
{
    (void)state;
    struct gpt_backend *be = (struct gpt_backend *)&be; /* must stay untouched */
    struct gpt_err err;
    memset(&err, 0, sizeof(err));
    assert_int_equal(gpt_backend_cuda_new(0, NULL, &be, &err), -GPT_E_NODEVICE);
    assert_ptr_equal(be, (struct gpt_backend *)&be);
    assert_int_equal(err.code, -GPT_E_NODEVICE);
    assert_true(strlen(err.msg) > 0);
    /* Asking twice is as safe as asking once. */
    assert_int_equal(gpt_backend_cuda_new(3, NULL, &be, NULL), -GPT_E_NODEVICE);
}

static void test_nccl_absent(void **state)
{
    (void)state;
    struct gpt_kv kv;
    struct gpt_err err;
    assert_int_equal(gpt_kv_mem_new(&kv, &err), 0);
    struct gpt_comm_opts o = {.rank = 0, .world = 1, .prefix = "t/", .timeout_ms = 1000};
    struct gpt_comm *c = NULL;
    assert_int_equal(gpt_comm_nccl_new(&o, &kv, 0, &c, &err), -GPT_E_NODEVICE);
    assert_null(c);
    gpt_kv_mem_free(&kv);
}

/* This host has no GPU: the probe says "no GPU", not "CUDA failed", so
 * GPU tests skip here instead of failing. */
static void test_probe_no_gpu(void **state)
{
    (void)state;
    char msg[512] = "";
    assert_int_equal(gpt_cuda_host_has_gpu_nodes(), 0);
    assert_int_equal(gpt_cuda_probe(msg, sizeof(msg)), 0);
    assert_non_null(strstr(msg, "no GPU"));
    assert_int_equal(gpt_cuda_probe(NULL, 0), 0);
}

/* A host with GPU device nodes whose CUDA cannot start: the probe fails
 * (GPU tests then fail instead of skipping) and says why, with the CUDA
 * error's name and text and the versions. The facts are those of this
 * host's runtime with device nodes pretended. */
static void test_probe_broken_host(void **state)
{
    (void)state;
    char msg[512] = "";
    struct gpt_cuda_probe_facts f = {.err = 35,
                                     .err_name = "cudaErrorInsufficientDriver",
                                     .err_text = "CUDA driver version is insufficient for CUDA "
                                                 "runtime version",
                                     .count = 0,
                                     .has_nodes = 1,
                                     .driver = 12020,
                                     .runtime = 13000};
    assert_int_equal(gpt_cuda_probe_verdict(&f, msg, sizeof(msg)), -EIO);
    assert_non_null(strstr(msg, "cudaErrorInsufficientDriver"));
    assert_non_null(strstr(msg, "insufficient for CUDA runtime"));
    assert_non_null(strstr(msg, "driver supports CUDA 12.2, runtime is 13.0"));
    assert_non_null(strstr(msg, "too old"));
    /* Another initialisation failure: named, not called "too old". */
    f.err = 3, f.err_name = "cudaErrorInitializationError", f.err_text = "initialization error";
    assert_int_equal(gpt_cuda_probe_verdict(&f, msg, sizeof(msg)), -EIO);
    assert_non_null(strstr(msg, "cudaErrorInitializationError (initialization error)"));
    assert_null(strstr(msg, "too old"));
    assert_int_equal(gpt_cuda_probe_verdict(&f, NULL, 0), -EIO);
    /* The same failure without device nodes is "no GPU" (this host). */
    f.has_nodes = 0;
    assert_int_equal(gpt_cuda_probe_verdict(&f, msg, sizeof(msg)), 0);
    assert_non_null(strstr(msg, "no GPU (initialization error)"));
    /* No visible device with nodes present (CUDA_VISIBLE_DEVICES=""): no GPU. */
    f.has_nodes = 1, f.err = 100, f.err_text = "no CUDA-capable device is detected";
    assert_int_equal(gpt_cuda_probe_verdict(&f, msg, sizeof(msg)), 0);
    /* Success. */
    f.err = 0, f.count = 2;
    assert_int_equal(gpt_cuda_probe_verdict(&f, msg, sizeof(msg)), 2);
    assert_non_null(strstr(msg, "2 GPU(s)"));
}

static void test_cpu_still_works(void **state)
{
    (void)state;
    struct gpt_backend *be = NULL;
    struct gpt_err err;
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    float *x;
    assert_int_equal(gpt_backend_alloc(be, 4 * sizeof(float), (void **)&x), 0);
    float h[4] = {1, 2, 3, 4};
    assert_int_equal(gpt_backend_upload(be, x, h, sizeof(h)), 0);
    assert_true(gpt_backend_sumsq(be, x, 4) == 30.0);
    gpt_backend_mem_free(be, x);
    gpt_backend_free(be);
}

int main(void)
{
    if (gpt_cuda_device_count() > 0 || gpt_cuda_host_has_gpu_nodes()) {
        printf("a GPU is present: covered by the gpu tests\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_absent),  cmocka_unit_test(test_nccl_absent),
        cmocka_unit_test(test_probe_no_gpu),    cmocka_unit_test(test_probe_broken_host),
        cmocka_unit_test(test_cpu_still_works), cmocka_unit_test(test_cublas_at_first_use),
        cmocka_unit_test(test_cudnn_loader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

int main(void)
{
    printf("built without CUDA\n");
    return 77;
}

#endif
