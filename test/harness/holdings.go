package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/tetherhq/tether/internal/domain"
)

// Holdings are what a host holds of the local provider's sandboxes, every
// kind of resource a create makes (internal/provider/local, create.go), by
// sandbox id: "process", "folder" (with the workspace image and /etc in
// it), "loop" (a loop device backed by its workspace image), "mount" (in
// the host's mount namespace), "uid" (a claim in the host-wide uid
// registry), "netns", "veth" and "nft" (an allow-list sandbox's network);
// and, by snapshot id, "snapshot" files. A veth is named by the sandbox
// id's last twelve characters only: its key is "veth:" and those.
type Holdings map[string][]string

func (hs Holdings) add(id, kind string) {
	for _, k := range hs[id] {
		if k == kind {
			return
		}
	}
	hs[id] = append(hs[id], kind)
}

// Holdings takes the host's inventory. Control groups, which every host
// shares, are SandboxCgroups'.
func (h *Host) Holdings() (Holdings, error) {
	out := Holdings{}
	procs, err := h.SandboxProcesses()
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		if p.SandboxID != "" {
			out.add(p.SandboxID, "process")
		}
	}
	entries, err := os.ReadDir(h.StateDir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.Name, err)
	}
	for _, e := range entries {
		if e.IsDir() && domain.ValidID(e.Name()) {
			out.add(e.Name(), "folder")
		}
	}
	snaps, _ := os.ReadDir(filepath.Join(h.StateDir, ".snapshots"))
	for _, e := range snaps {
		out.add(strings.TrimSuffix(e.Name(), ".tmp"), "snapshot")
	}
	real, err := filepath.EvalSymlinks(h.StateDir)
	if err != nil {
		return nil, err
	}
	h.loops(out, real)
	if err := h.mounts(out, real); err != nil {
		return nil, err
	}
	h.uids(out, real)
	h.network(out)
	return out, nil
}

// loops adds the loop devices backed by a workspace image under dir.
func (h *Host) loops(out Holdings, dir string) {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		backing := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if id := idUnder(backing, dir); id != "" {
			out.add(id, "loop")
		}
	}
}

// mounts adds the mounts under dir in the host's mount namespace.
func (h *Host) mounts(out Holdings, dir string) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", h.anchorPID))
	if err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			if id := idUnder(f[4], dir); id != "" {
				out.add(id, "mount")
			}
		}
	}
	return nil
}

// uids adds the claims of the host-wide uid registry whose holder is a
// sandbox folder under dir (internal/host/uidpool).
func (h *Host) uids(out Holdings, dir string) {
	entries, _ := os.ReadDir("/run/tether-uids")
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/run/tether-uids", e.Name()))
		if err != nil {
			continue
		}
		if id := idUnder(target, dir); id != "" {
			out.add(id, "uid")
		} else if id := idUnder(target, h.StateDir); id != "" {
			out.add(id, "uid")
		}
	}
}

// network adds an allow-list sandbox's namespace (tether-ID, in the host's
// /run/netns), its veth on the host (tth and the id's last twelve
// characters) and its nftables table (tether_ID).
func (h *Host) network(out Holdings) {
	nsDir := fmt.Sprintf("/proc/%d/root/run/netns", h.anchorPID)
	entries, _ := os.ReadDir(nsDir)
	for _, e := range entries {
		if id, ok := strings.CutPrefix(e.Name(), "tether-"); ok && domain.ValidID(id) {
			out.add(id, "netns")
		}
	}
	if links, err := exec.Command("ip", "-n", h.NetNS, "-o", "link", "show").Output(); err == nil {
		for line := range strings.SplitSeq(string(links), "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
				if suffix, ok := strings.CutPrefix(name, "tth"); ok {
					out.add("veth:"+suffix, "veth")
				}
			}
		}
	}
	if tables, err := exec.Command("ip", "netns", "exec", h.NetNS, "nft", "list", "tables").Output(); err == nil {
		for line := range strings.SplitSeq(string(tables), "\n") {
			if f := strings.Fields(line); len(f) == 3 {
				if id, ok := strings.CutPrefix(f[2], "tether_"); ok && domain.ValidID(id) {
					out.add(id, "nft")
				}
			}
		}
	}
}

// idUnder returns the sandbox id X of a path dir/X or dir/X/..., or "".
func idUnder(path, dir string) string {
	rest, ok := strings.CutPrefix(path, dir+"/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	if !domain.ValidID(id) {
		return ""
	}
	return id
}

// SandboxCgroups returns the sandboxes that have control groups of the
// local provider's (…/tether/ID, under each v1 controller the replicas
// run in, or the v2 root), whichever host made them: hosts share the
// machine's control groups.
func SandboxCgroups() ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, base := range sandboxCgroupBases() {
		entries, err := os.ReadDir(base)
		if err != nil {
			continue // no sandbox group made there yet
		}
		for _, e := range entries {
			if e.IsDir() && domain.ValidID(e.Name()) && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, e.Name())
			}
		}
	}
	return out, nil
}
