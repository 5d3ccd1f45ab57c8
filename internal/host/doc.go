// Package host holds nothing itself: its sub-packages are the host
// mechanics a provider of real sandboxes composes, each owning one kind of
// kernel or host object and knowing nothing of the sandbox API:
//
//   - hostos: what the others share of the OS (file locks, host tools run
//     with an environment of their own, OS threads of their own, folders
//     other users can reach, free disk);
//   - cgroup: control groups (a sandbox's, its execs', the parent's caps);
//   - seccomp: the system call filter, as a BPF program;
//   - egress: allow-list networking (a network namespace, a veth pair and
//     an nftables table per sandbox);
//   - workspace: a size-limited file system per sandbox (an ext4 image on
//     a loop device);
//   - uidpool: host uids handed out one per sandbox, host-wide;
//   - image: root file systems the operator registers (folders, tarballs
//     unpacked safely);
//   - outputcap: a command's output held to a limit, head and tail kept.
//
// internal/provider/local is their one user today; they live here rather
// than under it because none of them is a provider, and each is tested on
// its own against the real host.
package host
