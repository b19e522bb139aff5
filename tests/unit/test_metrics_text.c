/*
 * Unit tests of daemon/metrics_text (the Prometheus exposition rendering),
 * daemon/nvml (the dlopen'd GPU library, absent on CPU hosts) and
 * http_addr_check (which `http` values need a token).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "http.h"
#include "metrics_text.h"
#include "nvml.h"

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_escape(void **state)
{
    (void)state;
    struct metrics_buf b = {0};
    metrics_text_escape(&b, "a\"b\\c\nd");
    assert_int_equal(b.err, 0);
    assert_string_equal(b.p, "a\\\"b\\\\c\\nd");
    metrics_buf_done(&b);
}

static void test_jobs(void **state)
{
    (void)state;
    struct metrics_job jobs[2];
    memset(jobs, 0, sizeof(jobs));
    jobs[0].id = 7;
    snprintf(jobs[0].name, sizeof(jobs[0].name), "x\"} 1\ngptd_fake 2");
    jobs[0].state = "running";
    jobs[0].has_metric = true;
    jobs[0].step = 40;
    jobs[0].max_steps = 100;
    jobs[0].loss = 1.6322693824768066;
    jobs[0].lr = 1e-3;
    jobs[0].eta_s = NAN; /* unknown: left out */
    jobs[0].world_size = 2;
    jobs[0].restarts = 1;
    jobs[0].has_snapshot = true;
    jobs[0].snapshot_time = 990;
    jobs[0].snapshot_write_s = 0.25;
    jobs[1].id = 8;
    snprintf(jobs[1].name, sizeof(jobs[1].name), "queued-one");
    jobs[1].state = "queued";
    jobs[1].has_val_loss = false;
    struct metrics_node node = {.node = "n1",
                                .state = "dead",
                                .devices = "cpu",
                                .version = "1",
                                .heartbeat_age_s = 4.5,
                                .workers = 2};
    struct metrics_view v = {.now = 1000,
                             .started = 900,
                             .node = "n1",
                             .role = "coordinator",
                             .queued_jobs = 1,
                             .clients = 3,
                             .user_work_running = 2,
                             .user_work_waiting = 5,
                             .jobs = jobs,
                             .n_jobs = 2,
                             .nodes = &node,
                             .n_nodes = 1};
    struct metrics_buf b = {0};
    metrics_text_render(&b, &v);
    assert_int_equal(b.err, 0);
    const char *t = b.p;
    /* The hostile name stays inside its label: no new line, no new sample. */
    assert_non_null(strstr(t, "gptd_job_loss{job_id=\"7\",job_name=\"x\\\"} 1\\ngptd_fake 2\"} "
                              "1.6322693824768066\n"));
    assert_null(strstr(t, "\ngptd_fake"));
    assert_non_null(
        strstr(t, "gptd_job_step{job_id=\"7\",job_name=\"x\\\"} 1\\ngptd_fake 2\"} 40\n"));
    assert_non_null(
        strstr(t, "gptd_job_info{job_id=\"8\",job_name=\"queued-one\",state=\"queued\"} 1\n"));
    /* A job without metrics has info and restarts only. */
    assert_non_null(strstr(t, "gptd_job_restarts_total{job_id=\"8\",job_name=\"queued-one\"} 0\n"));
    assert_null(strstr(t, "gptd_job_loss{job_id=\"8\""));
    assert_null(strstr(t, "gptd_job_eta_seconds")); /* NaN ETA: not exported */
    assert_null(strstr(t, "gptd_job_val_loss"));    /* never evaluated */
    assert_non_null(strstr(t, "gptd_job_snapshot_age_seconds{job_id=\"7\",job_name=\"x\\\"} "
                              "1\\ngptd_fake 2\"} 10\n"));
    assert_non_null(strstr(t, "gptd_job_snapshot_write_seconds{job_id=\"7\""));
    assert_non_null(strstr(t, "# TYPE gptd_job_restarts_total counter\n"));
    /* One HELP/TYPE per family even with several samples. */
    assert_int_equal(count_of(t, "# TYPE gptd_job_info gauge\n"), 1);
    assert_int_equal(count_of(t, "\ngptd_job_info{"), 2);
    assert_non_null(strstr(t, "gptd_node_up{node=\"n1\"} 0\n"));
    assert_non_null(strstr(t, "gptd_node_heartbeat_age_seconds{node=\"n1\"} 4.5\n"));
    assert_non_null(strstr(t, "gptd_queued_jobs 1\n"));
    assert_non_null(strstr(t, "gptd_control_clients 3\n"));
    assert_non_null(strstr(t, "gptd_user_work_running 2\n"));
    assert_non_null(strstr(t, "gptd_user_work_waiting 5\n"));
    assert_null(strstr(t, "gptd_store_")); /* no store here */
    /* Every line is a comment or a sample: "name{...} value" or "name value". */
    for (const char *p = t; *p;) {
        const char *e = strchr(p, '\n');
        assert_non_null(e);
        assert_true(*p == '#' || strncmp(p, "gptd_", 5) == 0);
        p = e + 1;
    }
    metrics_buf_done(&b);
}

static void test_gpus(void **state)
{
    (void)state;
    struct metrics_buf b = {0};
    metrics_text_render_gpus(&b, "n1", NULL, 0);
    assert_int_equal(b.len, 0); /* no GPU: no series at all, not even HELP */
    struct nvml_gpu g = {.index = 0,
                         .name = "H\"200",
                         .uuid = "GPU-1",
                         .has_util = true,
                         .util_ratio = 0.5,
                         .has_mem = true,
                         .mem_used_bytes = 1024,
                         .mem_total_bytes = 4096,
                         .has_temp = true,
                         .temp_celsius = 40};
    metrics_text_render_gpus(&b, "n1", &g, 1);
    assert_int_equal(b.err, 0);
    assert_non_null(strstr(b.p, "gptd_gpu_utilization_ratio{node=\"n1\",gpu=\"0\","
                                "gpu_name=\"H\\\"200\",uuid=\"GPU-1\"} 0.5\n"));
    assert_non_null(strstr(b.p, "gptd_gpu_memory_total_bytes{node=\"n1\",gpu=\"0\""));
    assert_null(strstr(b.p, "gptd_gpu_power_watts")); /* not reported: left out */
    metrics_buf_done(&b);
}

static void test_nvml_absent(void **state)
{
    (void)state;
    struct nvml *n = NULL;
    struct gpt_err err;
    /* A library that is not there: -ENOENT, naming it. */
    assert_int_equal(nvml_open("libnvidia-ml-gptd-absent.so.1", &n, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "libnvidia-ml-gptd-absent.so.1"));
    assert_null(n);
    /* A library without NVML's symbols: -ENOSYS, naming the first missing. */
    assert_int_equal(nvml_open("libm.so.6", &n, &err), -ENOSYS);
    assert_non_null(strstr(err.msg, "nvmlInit_v2"));
    /* The real one: absent on a CPU host, where nothing is exported. */
    int rc = nvml_open(NULL, &n, &err);
    if (rc == 0) {
        struct nvml_gpu g[NVML_GPUS_MAX];
        assert_true(nvml_sample(n, g, NVML_GPUS_MAX) >= 0);
        nvml_close(n);
    } else {
        assert_int_equal(rc, -ENOENT);
    }
    nvml_close(NULL);
}

/* The dlopen path end to end, through a stand-in library with NVML's
 * entry points (tests/unit/fake_nvml.c): two GPUs, the second without
 * power readings. */
static void test_nvml_fake(void **state)
{
    (void)state;
    struct nvml *n = NULL;
    struct gpt_err err;
    assert_int_equal(nvml_open(GPTD_FAKE_NVML, &n, &err), 0);
    struct nvml_gpu g[NVML_GPUS_MAX];
    assert_int_equal(nvml_sample(n, g, NVML_GPUS_MAX), 2);
    assert_int_equal(nvml_sample(n, g, 1), 1); /* capped at cap */
    assert_int_equal(nvml_sample(n, g, NVML_GPUS_MAX), 2);
    assert_string_equal(g[0].name, "Fake \"GPU\" 1");
    assert_string_equal(g[1].uuid, "GPU-fake-2");
    assert_true(g[0].has_util && g[0].has_mem && g[0].has_temp && g[0].has_power);
    assert_true(g[0].util_ratio == 0.38);
    assert_true(g[0].mem_total_bytes == 80ull << 30);
    assert_true(g[0].power_watts == 123.456);
    assert_false(g[1].has_power);
    struct metrics_buf b = {0};
    metrics_text_render_gpus(&b, "n1", g, 2);
    assert_int_equal(b.err, 0);
    assert_non_null(strstr(b.p, "gptd_gpu_utilization_ratio{node=\"n1\",gpu=\"0\","
                                "gpu_name=\"Fake \\\"GPU\\\" 1\",uuid=\"GPU-fake-1\"} 0.38\n"));
    assert_non_null(strstr(b.p, "gptd_gpu_memory_total_bytes{node=\"n1\",gpu=\"1\""));
    assert_non_null(strstr(b.p, "gptd_gpu_temperature_celsius{node=\"n1\",gpu=\"1\""));
    assert_non_null(strstr(b.p, "gptd_gpu_power_watts{node=\"n1\",gpu=\"0\""));
    assert_null(strstr(b.p, "gptd_gpu_power_watts{node=\"n1\",gpu=\"1\""));
    assert_int_equal(count_of(b.p, "# TYPE gptd_gpu_power_watts gauge\n"), 1);
    metrics_buf_done(&b);
    nvml_close(n);
}

/* The process families under Prometheus's standard names and types; a
 * count not known is left out. */
static void test_process(void **state)
{
    (void)state;
    struct metrics_process p = {.cpu_seconds = 1.5,
                                .start_time_seconds = 1700000000.25,
                                .resident_bytes = 123456789,
                                .virtual_bytes = 987654321,
                                .open_fds = 17,
                                .max_fds = -1};
    struct metrics_buf b = {0};
    metrics_text_render_process(&b, &p);
    assert_int_equal(b.err, 0);
    assert_non_null(strstr(b.p, "# TYPE process_cpu_seconds_total counter\n"
                                "process_cpu_seconds_total 1.5\n"));
    assert_non_null(strstr(b.p, "# TYPE process_resident_memory_bytes gauge\n"
                                "process_resident_memory_bytes 123456789\n"));
    assert_non_null(strstr(b.p, "process_virtual_memory_bytes 987654321\n"));
    assert_non_null(strstr(b.p, "# TYPE process_open_fds gauge\nprocess_open_fds 17\n"));
    assert_non_null(strstr(b.p, "process_start_time_seconds 1700000000.25\n"));
    assert_null(strstr(b.p, "process_max_fds"));
    metrics_buf_done(&b);
}

static void test_addr_check(void **state)
{
    (void)state;
    bool lo = false;
    struct gpt_err err;
    assert_int_equal(http_addr_check("127.0.0.1:0", "", &lo, &err), 0);
    assert_true(lo);
    assert_int_equal(http_addr_check("127.0.0.2:9100", NULL, &lo, &err), 0);
    assert_true(lo);
    assert_int_equal(http_addr_check("[::1]:9100", "", &lo, &err), 0);
    assert_true(lo);
    assert_int_equal(http_addr_check("0.0.0.0:9100", "", &lo, &err), -EINVAL);
    assert_string_equal(err.path, "http_token_file");
    assert_int_equal(http_addr_check("[::]:9100", "", &lo, &err), -EINVAL);
    assert_int_equal(http_addr_check("10.1.2.3:9100", "/etc/gptd/http.token", &lo, &err), 0);
    assert_false(lo);
    assert_int_equal(http_addr_check("localhost:9100", "", &lo, &err), -EINVAL);
    assert_string_equal(err.path, "http");
    assert_int_equal(http_addr_check("127.0.0.1:70000", "", &lo, &err), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape),    cmocka_unit_test(test_jobs),
        cmocka_unit_test(test_gpus),      cmocka_unit_test(test_nvml_absent),
        cmocka_unit_test(test_nvml_fake), cmocka_unit_test(test_addr_check),
        cmocka_unit_test(test_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
