/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The FDB in ingress: learning a source MAC, and where a destination MAC is (a static entry, else a learned one
 * that has not aged out), through each CPU's recent source and destination.
 */
#ifndef XDPFLEET_VTEP_FDB_H
#define XDPFLEET_VTEP_FDB_H

#include "vtep_frame.h"

static __always_inline void fdb_changed(void)
{
	__u32 zero = 0;
	__u64 *generation = bpf_map_lookup_elem(&fdb_generation, &zero);

	if (generation)
		__sync_fetch_and_add(generation, 1);
}

/* The tick's time (CLOCK_MONOTONIC to within a tick): aging counts seconds, and reading the clock source costs more
 * than a hash lookup here. */
static __always_inline __u64 clock_now(struct frame *f)
{
	if (!f->now)
		f->now = bpf_ktime_get_coarse_ns();
	return f->now;
}

static __always_inline int expired(struct frame *f, struct fdb_entry *e)
{
	return (__s64)(clock_now(f) - e->seen_ns) > (__s64)f->settings->aging_ns;
}

/* Learn that `mac` of the frame's VNI is behind local port `ifindex` (remote_ip 0), or behind the remote VTEP
 * remote_ip (peer: its tunnel_peers index) through tunnel port `ifindex`. A static entry is never overridden. */
static __always_inline void learn(struct frame *f, __u8 *mac, __u32 ifindex, __be32 remote_ip, __u32 peer)
{
	struct recent_source *recent = &f->cpu->recent;
	struct fdb_key key = { .vni = f->vni };
	struct fdb_entry *e, fresh = {};

	if (mac[0] & 1) /* a multicast source is not a station */
		return;
	if (f->jiffies - recent->seen_jiffies < RECENT_JIFFIES && recent->vni == f->vni &&
	    recent->ifindex == ifindex && recent->remote_ip == remote_ip &&
	    *(__u32 *)recent->mac == *(__u32 *)mac && *(__u16 *)&recent->mac[4] == *(__u16 *)&mac[4])
		return;
	__builtin_memcpy(key.mac, mac, 6);
	e = bpf_map_lookup_elem(&fdb, &key);
	if (e && e->ifindex == ifindex && e->remote_ip == remote_ip) {
		if ((__s64)(clock_now(f) - e->seen_ns) >= FDB_REFRESH_NS) {
			if (expired(f, e)) { /* gone and back: as if it had been aged out, then learned */
				count_fdb(f, FDB_AGED_OUT);
				count_fdb(f, FDB_LEARNED);
			}
			e->seen_ns = clock_now(f);
			e->peer = peer;
		}
	} else if (!e && f->settings->static_entries && (e = bpf_map_lookup_elem(&fdb_static, &key))) {
		if (e->ifindex != ifindex || e->remote_ip != remote_ip) {
			count_fdb(f, FDB_STATIC_CONFLICT); /* every such frame, so not remembered as recent */
			return;
		}
	} else {
		count_fdb(f, e ? FDB_MOVED : FDB_LEARNED);
		fresh.seen_ns = clock_now(f);
		fresh.ifindex = ifindex;
		fresh.remote_ip = remote_ip;
		fresh.peer = peer;
		fresh.vid = f->vid;
		bpf_map_update_elem(&fdb, &key, &fresh, BPF_ANY);
		fdb_changed();
	}
	recent->seen_jiffies = f->jiffies;
	recent->vni = f->vni;
	recent->ifindex = ifindex;
	recent->remote_ip = remote_ip;
	__builtin_memcpy(recent->mac, mac, 6);
}

/* Where a unicast MAC of the frame's VNI is: a static entry, else a learned one that has not aged out. */
static __always_inline struct fdb_entry *fdb_lookup(struct frame *f, __u8 *mac)
{
	struct fdb_key key = { .vni = f->vni };
	struct fdb_entry *e;

	__builtin_memcpy(key.mac, mac, 6);
	if (f->settings->static_entries) {
		e = bpf_map_lookup_elem(&fdb_static, &key);
		if (e)
			return e;
	}
	e = bpf_map_lookup_elem(&fdb, &key);
	if (e && expired(f, e)) {
		bpf_map_delete_elem(&fdb, &key);
		fdb_changed();
		count_fdb(f, FDB_AGED_OUT);
		return NULL;
	}
	return e;
}

/* fdb_lookup(), through this CPU's recent destination: a burst to one MAC (or to one unknown MAC) costs one lookup. */
static __always_inline struct fdb_entry *fdb_find(struct frame *f, __u8 *mac)
{
	struct recent_destination *recent = &f->cpu->destination;
	__u32 zero = 0;
	__u64 *generation = bpf_map_lookup_elem(&fdb_generation, &zero);
	struct fdb_entry *e;

	if (!generation)
		return fdb_lookup(f, mac);
	if (recent->generation == *generation && f->jiffies - recent->checked_jiffies < RECENT_JIFFIES &&
	    recent->vni == f->vni && *(__u32 *)recent->mac == *(__u32 *)mac &&
	    *(__u16 *)&recent->mac[4] == *(__u16 *)&mac[4])
		return recent->found ? &recent->entry : NULL;
	recent->generation = *generation; /* before the lookup: a change meanwhile makes this stale at once */
	e = fdb_lookup(f, mac);
	recent->checked_jiffies = f->jiffies;
	recent->vni = f->vni;
	__builtin_memcpy(recent->mac, mac, 6);
	recent->found = e != NULL;
	if (e)
		recent->entry = *e;
	return e;
}

#endif
