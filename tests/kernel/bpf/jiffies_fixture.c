/* SPDX-License-Identifier: GPL-2.0-only */
/* Test fixture: a user's object for xdp_program, whose only helper (bpf_jiffies64, Linux 5.5) the object's own
 * check against the kernel has to find. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int jiffies_pass(struct xdp_md *ctx)
{
	return bpf_jiffies64() ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
