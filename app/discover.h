/*
 * Zero-setup rings (issue 19, docs/ring.md "Zero-setup ring"): the options
 * that discovery shares between lares worker, devices, pair, unpair and the
 * head's --ring auto, the user's config directory, this device's key and
 * name, and the ring.json made from the paired devices that answer.
 */
#ifndef LARES_APP_DISCOVER_H
#define LARES_APP_DISCOVER_H

#include "app.h"
#include "cluster/cluster.h"
#include "discovery/discovery.h"

typedef struct app_disc {
    disc_opts net;
    const char *config_dir; /* --config-dir; else LARES_CONFIG_DIR, XDG_CONFIG_HOME, ~/.config */
    const char *name;       /* --name; else the host name */
    int32_t wait_ms;        /* how long a scan listens for answers */
} app_disc;

/* Defaults, then the environment: LARES_CONFIG_DIR, LARES_DISCOVERY_PORT,
 * LARES_DISCOVERY_LOOPBACK=1 (tests on one machine). */
void app_disc_init(app_disc *d);
/* --peer, --discovery, --discovery-port, --discovery-loopback, --config-dir,
 * --name, --wait: 1 taken, 0 not one of them, -1 bad (printed). */
int app_disc_opt(int argc, char **argv, int *i, app_disc *d);
void app_disc_usage(FILE *to);
/* The config directory (made, mode 0700): false (printed) when none. */
bool app_config_dir(const app_disc *d, char *out, size_t cap);
/* This device's key pair (config dir/device.key), made on first use. */
bool app_device_key(const app_disc *d, cluster_keypair *kp, char *path, size_t cap);
/* This device's name: --name, else the host name made valid. */
void app_device_name(const app_disc *d, char out[DISC_NAME_MAX + 1]);
/* config dir/paired */
bool app_paired_path(const app_disc *d, char *out, size_t cap);
/* The options of run, chat and serve (app_session_opt hands them here). */
app_disc *app_session_disc(void);
/* --ring auto: scans, keeps the paired devices that answered and writes a
 * ring.json with automatic windows (config dir/ring-auto.json); o->ring then
 * names it. Anything else is left alone. false (printed) on failure. */
bool app_ring_auto(lares_session_opts *o);

#endif
