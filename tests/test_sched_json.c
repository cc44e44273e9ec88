/*
 * sched: devices as JSON. Hand-written files are read with their units; a
 * device written out reads back the same; every kind of bad input is refused
 * with a message naming the place and the fault; a plan's JSON carries the
 * windows every device runs.
 */
#include "check.h"
#include "sched/sched.h"

#include <jansson.h>
#include <math.h>

static const char *good =
    "{\"network\": {\"latency_ms\": 4, \"bandwidth\": \"300Mbit/s\"},\n"
    " \"devices\": [\n"
    "  {\"name\": \"desk\", \"os\": \"linux\", \"head\": true,\n"
    "   \"cpu\": {\"cores\": 16, \"flops\": {\"q4_k\": 4e11, \"*\": 2e11}, \"mem_bw\": "
    "\"40GB/s\"},\n"
    "   \"memory\": {\"available\": \"9.7GiB\", \"total\": \"32GiB\"},\n"
    "   \"disk\": {\"seq_read\": \"3.17GB/s\", \"free\": \"100GB\"},\n"
    "   \"gpu\": {\"backend\": \"cuda\", \"name\": \"2080 Ti\", \"vram_available\": \"11GiB\",\n"
    "           \"flops\": {\"*\": 6.7e12}, \"mem_bw\": 4.3e11}},\n"
    "  {\"name\": \"mac\", \"os\": \"macos\",\n"
    "   \"cpu\": {\"cores\": 8, \"flops\": {\"f32\": 2e11, \"Q6_K\": 1e11, \"*\": 5e10}, "
    "\"mem_bw\": 4.7e10},\n"
    "   \"memory\": {\"available\": 2576980377, \"swap_available\": 0},\n"
    "   \"disk\": {\"seq_read\": \"0.72GB/s\", \"rand_read\": \"0.1GB/s\"},\n"
    "   \"gpu\": {\"backend\": \"metal\", \"vram_available\": \"2.4GiB\", \"flops\": {\"*\": "
    "1.3e12},\n"
    "           \"mem_bw\": \"47GB/s\"},\n"
    "   \"net\": {\"latency_ms\": 8, \"bandwidth\": \"100Mbit/s\"}},\n"
    "  {\"name\": \"phone\", \"os\": \"android\",\n"
    "   \"cpu\": {\"cores\": 8, \"flops\": {\"*\": 8.6e10}, \"mem_bw\": \"30GB/s\"},\n"
    "   \"memory\": {\"available\": \"1.9GiB\", \"swap_available\": \"512MiB\"},\n"
    "   \"disk\": {\"seq_read\": \"1.37GB/s\", \"stream_read\": \"1.2GB/s\", "
    "\"stream_cpu\": \"9GB/s\", \"direct_read\": \"1.1GB/s\", \"cached_share\": 0.25, "
    "\"note\": \"25 % held\"}}\n"
    " ],\n"
    " \"links\": [{\"from\": \"phone\", \"to\": \"desk\", \"latency_ms\": 2, \"bandwidth\": "
    "\"1Gbit/s\"}]\n"
    "}\n";

static void test_good(void) {
    lares_error err = {0};
    sched_device *d = NULL;
    sched_link *links = NULL;
    size_t n = 0, nl = 0;
    sched_hop net = {-1, 0};
    CHECK_OK(sched_devices_parse(good, strlen(good), "good.json", &d, &n, &links, &nl, &net, &err),
             &err);
    if (d == NULL) {
        return;
    }
    CHECK(n == 3 && nl == 2); /* a link goes both ways unless told otherwise */
    CHECK(strcmp(d[0].name, "desk") == 0 && d[0].head && d[0].os == SCHED_OS_LINUX);
    CHECK(d[0].cores == 16 && d[0].cpu_flops.by_type[GGUF_TYPE_Q4_K] == 4e11 &&
          d[0].cpu_flops.other == 2e11);
    CHECK(d[0].mem_bw_Bps == 40e9);
    CHECK(d[0].ram_avail_bytes == (uint64_t)(9.7 * 1073741824.0));
    CHECK(d[0].ram_total_bytes == 32ull << 30);
    CHECK(d[0].disk_seq_Bps == 3.17e9 && d[0].disk_free_bytes == 100000000000);
    CHECK(d[0].gpu == SCHED_GPU_CUDA && d[0].vram_avail_bytes == 11ull << 30 &&
          strcmp(d[0].gpu_name, "2080 Ti") == 0 && d[0].gpu_mem_bw_Bps == 4.3e11);
    CHECK(d[1].os == SCHED_OS_MACOS && d[1].gpu == SCHED_GPU_METAL);
    CHECK(d[1].cpu_flops.by_type[GGUF_TYPE_F32] == 2e11 &&
          d[1].cpu_flops.by_type[GGUF_TYPE_Q6_K] == 1e11 && d[1].cpu_flops.other == 5e10);
    CHECK(d[1].disk_rand_Bps == 0.1e9 && d[1].disk_free_bytes == -1);
    CHECK(d[1].net_out.latency_s == 0.008 && d[1].net_out.bandwidth_Bps == 12.5e6);
    CHECK(d[2].os == SCHED_OS_ANDROID && d[2].swap_avail_bytes == 512ull << 20);
    CHECK(d[2].net_out.latency_s < 0); /* not given: the link or the network prices it */
    CHECK(d[2].disk_stream_Bps == 1.2e9 && d[2].disk_stream_cpu_Bps == 9e9);
    CHECK(d[0].disk_stream_Bps == 0 && d[0].disk_stream_cpu_Bps == 0);
    /* the direct-read bound and the cached share are optional (older profiles) */
    CHECK(d[2].disk_direct_Bps == 1.1e9 && d[2].disk_cached_share == 0.25);
    CHECK(d[0].disk_direct_Bps == 0 && d[0].disk_cached_share == 0);
    CHECK(net.latency_s == 0.004 && net.bandwidth_Bps == 37.5e6);
    CHECK(links[0].from == 2 && links[0].to == 0 && links[1].from == 0 && links[1].to == 2);
    CHECK(links[0].hop.latency_s == 0.002 && links[0].hop.bandwidth_Bps == 125e6);

    /* written out and read back: the same device */
    for (size_t i = 0; i < n; i++) {
        char *text = NULL;
        CHECK_OK(sched_device_to_json(&d[i], &text, &err), &err);
        sched_device *back = NULL;
        size_t nb = 0;
        if (text != NULL) {
            CHECK_OK(sched_devices_parse(text, strlen(text), "roundtrip", &back, &nb, NULL, NULL,
                                         NULL, &err),
                     &err);
        }
        if (back != NULL) {
            CHECK(nb == 1 && strcmp(back->name, d[i].name) == 0 && back->os == d[i].os &&
                  back->head == d[i].head && back->cores == d[i].cores &&
                  back->ram_avail_bytes == d[i].ram_avail_bytes &&
                  back->swap_avail_bytes == d[i].swap_avail_bytes &&
                  back->disk_free_bytes == d[i].disk_free_bytes && back->gpu == d[i].gpu &&
                  back->vram_avail_bytes == d[i].vram_avail_bytes);
            CHECK(fabs(back->mem_bw_Bps / d[i].mem_bw_Bps - 1) < 1e-5);
            CHECK(fabs(back->disk_seq_Bps / d[i].disk_seq_Bps - 1) < 1e-5);
            CHECK(back->disk_stream_Bps == d[i].disk_stream_Bps &&
                  back->disk_stream_cpu_Bps == d[i].disk_stream_cpu_Bps);
            CHECK(back->disk_direct_Bps == d[i].disk_direct_Bps &&
                  back->disk_cached_share == d[i].disk_cached_share);
            for (int t = 0; t < GGUF_TYPE_COUNT; t++) {
                CHECK(fabs(back->cpu_flops.by_type[t] - d[i].cpu_flops.by_type[t]) <=
                      1e-5 * d[i].cpu_flops.by_type[t]);
            }
            CHECK(fabs(back->net_out.latency_s - d[i].net_out.latency_s) < 1e-9);
        }
        lares_free(back);
        lares_free(text);
    }
    lares_free(d);
    lares_free(links);
}

typedef struct bad_case {
    const char *json;
    const char *expect; /* substrings of the message, separated by '|' */
} bad_case;

#define DEV(extra)                                                                                 \
    "{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": 1e10}, "      \
    "\"mem_bw\": 1e10}, \"memory\": {\"available\": \"1GiB\"}, \"disk\": {\"seq_read\": "          \
    "1e9}" extra "}"

static void test_bad(void) {
    static const bad_case cases[] = {
        {"{\"devices\": [", "bad.json: line 1|column"},
        {"", "bad.json: line"},
        {"42", "expected a device object"},
        {"[]", "no devices"},
        {"[" DEV("") ", " DEV("") "]", "devices[1].name: repeats"},
        {"{\"name\": \"x\"}", "device.os: missing (required)"},
        {"[{\"name\": \"x\", \"os\": \"linux\"}]", "devices[0].cpu: missing (required)"},
        {DEV(", \"colour\": \"red\""), "device.colour: unknown field|known: name"},
        {"{\"name\": \"x\", \"os\": \"windows\", \"cpu\": {}}", "device.os: must be linux"},
        {"{\"name\": 7}", "device.name: must be a string"},
        {"{\"name\": \"\", \"os\": \"linux\", \"cpu\": {}, \"memory\": {}, \"disk\": {}}",
         "name: is empty"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 0}, \"memory\": {}, "
         "\"disk\": {}}",
         "device.cpu.cores: 0 is out of range"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2.5}, \"memory\": {}, "
         "\"disk\": {}}",
         "device.cpu.cores: must be a whole number"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"q4_z\": 1}, "
         "\"mem_bw\": 1}, \"memory\": {}, \"disk\": {}}",
         "device.cpu.flops.q4_z: is not a tensor type"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": -5}, "
         "\"mem_bw\": 1}, \"memory\": {}, \"disk\": {}}",
         "device.cpu.flops.*: must be a positive"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {}, "
         "\"mem_bw\": 1}, \"memory\": {}, \"disk\": {}}",
         "device.cpu.flops: has no figures"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": 1}, "
         "\"mem_bw\": \"fast\"}, \"memory\": {}, \"disk\": {}}",
         "device.cpu.mem_bw: is not a rate"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": 1}, "
         "\"mem_bw\": 1}, \"memory\": {\"available\": -1}, \"disk\": {}}",
         "device.memory.available: must be a non-negative size"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": 1}, "
         "\"mem_bw\": 1}, \"memory\": {\"available\": \"-2GB\"}, \"disk\": {}}",
         "device.memory.available: is not a size"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": 1}, "
         "\"mem_bw\": 1}, \"memory\": {}, \"disk\": {}}",
         "device.memory.available: missing (required)"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": 1}, "
         "\"mem_bw\": 1}, \"memory\": {\"available\": 1}, \"disk\": {\"seq_read\": 0}}",
         "device.disk.seq_read: must be positive"},
        {"{\"name\": \"x\", \"os\": \"macos\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": 1}, "
         "\"mem_bw\": 1}, \"memory\": {\"available\": 1}, \"disk\": {\"seq_read\": 1}}",
         "device.disk.rand_read: missing (required)"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": 1}, "
         "\"mem_bw\": 1}, \"memory\": {\"available\": 1}, \"disk\": {\"seq_read\": 1, "
         "\"stream_cpu\": -1}}",
         "device.disk.stream_cpu: must be a non-negative rate"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": 1}, "
         "\"mem_bw\": 1}, \"memory\": {\"available\": 1}, \"disk\": {\"seq_read\": 1, "
         "\"cached_share\": 1.5}}",
         "device.disk.cached_share: must be a share from 0 to 1"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": 1}, "
         "\"mem_bw\": 1}, \"memory\": {\"available\": 1}, \"disk\": {\"seq_read\": 1, "
         "\"cached_share\": \"most\"}}",
         "device.disk.cached_share: must be a number"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": 1}, "
         "\"mem_bw\": 1}, \"memory\": {\"available\": 1}, \"disk\": {\"seq_read\": 1, "
         "\"direct_read\": 0}}",
         "device.disk.direct_read: must be positive"},
        {"{\"name\": \"x\", \"os\": \"linux\", \"cpu\": {\"cores\": 2, \"flops\": {\"*\": 1}, "
         "\"mem_bw\": 1}, \"memory\": {\"available\": 1}, \"disk\": {\"seq_read\": 1, "
         "\"note\": 7}}",
         "device.disk.note: must be a string"},
        {DEV(", \"gpu\": {\"backend\": \"vulkan\", \"vram_available\": 1, \"flops\": {\"*\": 1}, "
             "\"mem_bw\": 1}"),
         "device.gpu.backend: must be cuda or metal"},
        {DEV(", \"gpu\": {\"backend\": \"cuda\", \"flops\": {\"*\": 1}, \"mem_bw\": 1}"),
         "device.gpu.vram_available: missing (required)"},
        {DEV(", \"gpu\": [1]"), "device.gpu: must be an object"},
        {DEV(", \"net\": {\"latency_ms\": 3}"), "device.net.bandwidth: missing (required)"},
        {DEV(", \"net\": {\"latency_ms\": -3, \"bandwidth\": 1}"),
         "device.net.latency_ms: -3 is negative"},
        {"{\"devices\": [" DEV("") "], \"links\": [{\"from\": \"x\", \"to\": \"y\", "
                                   "\"latency_ms\": 1, \"bandwidth\": 1}]}",
         "links[0].to: 'y' is not a device"},
        {"{\"devices\": [" DEV("") "], \"links\": [{\"from\": \"x\", \"to\": \"x\", "
                                   "\"latency_ms\": 1, \"bandwidth\": 1}]}",
         "links[0].to: is the same device"},
        {"{\"devices\": [" DEV("") "], \"network\": {\"latency_ms\": 1}}",
         "network.bandwidth: missing"},
        {"{\"devices\": [" DEV("") "], \"extra\": 1}", "extra: unknown field"},
        {"{\"devices\": {}}", "devices: must be an array"},
        {"{\"name\": \"a\", \"name\": \"b\"}", "duplicate"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lares_error err = {0};
        sched_device *d = NULL;
        size_t n = 0;
        lares_status st = sched_devices_parse(cases[i].json, strlen(cases[i].json), "bad.json", &d,
                                              &n, NULL, NULL, NULL, &err);
        CHECKF(st == LARES_EFORMAT && d == NULL, "case %zu parsed (%d)", i, st);
        char want[256];
        snprintf(want, sizeof want, "%s", cases[i].expect);
        for (char *save = NULL, *w = strtok_r(want, "|", &save); w != NULL;
             w = strtok_r(NULL, "|", &save)) {
            CHECKF(strstr(err.msg, w) != NULL, "case %zu: '%s' not in: %s", i, w, err.msg);
        }
        lares_free(d);
    }
}

/* the plan's JSON: windows per round, baselines with their figures or errors */
static void test_plan_json(void) {
    lares_error err = {0};
    sched_device *d = NULL;
    sched_link *links = NULL;
    size_t n = 0, nl = 0;
    sched_opts o = sched_opts_default();
    CHECK_OK(sched_devices_parse(good, strlen(good), "good.json", &d, &n, &links, &nl,
                                 &o.net_default, &err),
             &err);
    sched_model *m = NULL;
    CHECK_OK(sched_model_from_shape("llama2-7b:q4_k_m", &m, &err), &err);
    if (d == NULL || m == NULL) {
        lares_free(d);
        lares_free(links);
        sched_model_free(m);
        return;
    }
    o.links = links;
    o.n_links = nl;
    o.n_ctx = 2048;
    size_t ring[2] = {0, 2};
    int32_t w[2] = {12, 4}, g[2] = {10, 0};
    sched_plan *p = NULL;
    CHECK_OK(sched_plan_from_windows(m, d, n, &o, ring, w, g, 2, &p, &err), &err);
    if (p != NULL) {
        sched_alternative alt[2] = {{.placement = SCHED_EVEN, .plan = p},
                                    {.placement = SCHED_SINGLE}};
        snprintf(alt[1].error, sizeof alt[1].error, "no single device can run the model");
        char *text = NULL;
        CHECK_OK(sched_plan_to_json(p, alt, 2, m, d, &o, &text, &err), &err);
        json_t *root = text ? json_loads(text, 0, NULL) : NULL;
        CHECK(root != NULL);
        if (root != NULL) {
            CHECK(json_integer_value(json_object_get(root, "k")) == 2);
            CHECK(strcmp(json_string_value(json_object_get(root, "head")), "desk") == 0);
            json_t *devs = json_object_get(root, "devices");
            CHECK(json_array_size(devs) == 2);
            json_t *phone = json_array_get(devs, 1);
            CHECK(strcmp(json_string_value(json_object_get(phone, "name")), "phone") == 0);
            /* phone: layers [12,16) in round 0 and [28,32) in round 1 */
            json_t *win = json_object_get(phone, "windows");
            CHECK(json_array_size(win) == 2 &&
                  json_integer_value(json_array_get(json_array_get(win, 1), 0)) == 28 &&
                  json_integer_value(json_array_get(json_array_get(win, 1), 1)) == 32);
            json_t *dropped = json_object_get(root, "dropped");
            CHECK(json_array_size(dropped) == 1 &&
                  strcmp(json_string_value(json_array_get(dropped, 0)), "mac") == 0);
            json_t *base = json_object_get(root, "baselines");
            CHECK(json_real_value(json_object_get(json_object_get(base, "even"), "t_token_ms")) >
                  0);
            CHECK(
                strstr(json_string_value(json_object_get(json_object_get(base, "single"), "error")),
                       "no single") != NULL);
            json_decref(root);
        }
        lares_free(text);
        sched_plan_free(p);
    }
    sched_model_free(m);
    lares_free(d);
    lares_free(links);
}

int main(void) {
    test_good();
    test_bad();
    test_plan_json();
    return check_finish("sched_json");
}
