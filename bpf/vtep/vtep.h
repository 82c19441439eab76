/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * VXLAN VTEP in XDP: the map keys and values of the programs.
 *
 * Those user space reads or writes, the limits, the enums and the peer member key come from vtep_abi.h, which is
 * generated from plugins/module_utils/vtep/abi.py and layouts.py (`make abi`); the object's BTF is checked against
 * the same declarations at load. Here: the values only the programs use.
 */
#ifndef XDPFLEET_VTEP_H
#define XDPFLEET_VTEP_H

#include <linux/types.h>

#include "vtep_abi.h"

/* copy_state[port slot], per CPU: the flooded frame whose copies are being numbered (by its stamp), the next copy
 * number, and the VNI's peers behind the port, found once per frame instead of once per copy. */
struct copy_state {
	__u32 seq;
	__u32 next_copy;
	__u32 first_peer;
	__u32 peers;
};

#endif
