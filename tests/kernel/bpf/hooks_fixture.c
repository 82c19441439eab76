/* SPDX-License-Identifier: GPL-2.0-only */
/* Test fixture: one object with an XDP program and a tc program that count what they see in one shared map
 * (slot 0: XDP, slot 1: tc) and let everything pass. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} seen SEC(".maps");

static __always_inline void count(__u32 slot)
{
	__u64 *n = bpf_map_lookup_elem(&seen, &slot);

	if (n)
		__sync_fetch_and_add(n, 1);
}

SEC("xdp")
int hooks_xdp(struct xdp_md *ctx)
{
	count(0);
	return XDP_PASS;
}

SEC("tc")
int hooks_tc(struct __sk_buff *skb)
{
	count(1);
#ifdef HOOKS_TC_TWICE /* another version of the program: an upgrade */
	count(1);
#endif
	return 0; /* TC_ACT_OK: the programs after it on the hook do not run */
}

char LICENSE[] SEC("license") = "GPL";
