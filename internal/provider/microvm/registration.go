package microvm

import (
	"context"
	"fmt"
	"strconv"

	"github.com/tetherhq/tether/provider"
)

// Defaults of the provider's settings.
const (
	DefaultStateDir = ".tether/microvm"
	DefaultImageDir = ".data/microvm"
)

// Registration makes microvm one of Tether's providers.
var Registration = provider.Registration{
	Name: Name,
	Settings: []provider.Setting{
		{Name: "MICROVM_STATE_DIR", Default: DefaultStateDir, Doc: "folder of the VMs (their disks, sockets and logs); made if missing"},
		{Name: "MICROVM_IMAGE_DIR", Default: DefaultImageDir, Doc: "the guest image: vmlinuz, initramfs.cpio and rootfs.ext4, as scripts/microvm.sh builds them"},
		{Name: "MICROVM_ACCEL", Default: AccelAuto, Doc: "kvm, tcg (QEMU's emulation) or auto: KVM where it can run a stock kernel, else tcg"},
		{Name: "MICROVM_MEMORY_MB", Default: "256", Doc: "a VM's memory in MiB unless its create asks (params.memory_mb)"},
		{Name: "MICROVM_MAX_MEMORY_MB", Default: "2048", Doc: "the most params.memory_mb may ask for"},
		{Name: "MICROVM_CPUS", Default: "1", Doc: "a VM's vCPUs unless its create asks (params.cpus)"},
		{Name: "MICROVM_MAX_CPUS", Default: "2", Doc: "the most params.cpus may ask for"},
		{Name: "MICROVM_WORKSPACE_MB", Default: "1024", Doc: "size of a VM's workspace disk in MiB unless its create asks (params.workspace_mb)"},
		{Name: "MICROVM_MAX_WORKSPACE_MB", Default: "16384", Doc: "the most params.workspace_mb may ask for"},
	},
	New: func(_ context.Context, s *provider.Settings) (provider.Provider, error) {
		cfg := Config{
			StateDir:           s.String("MICROVM_STATE_DIR"),
			ImageDir:           s.String("MICROVM_IMAGE_DIR"),
			Accel:              s.String("MICROVM_ACCEL"),
			DefaultMemoryMB:    int(s.Int("MICROVM_MEMORY_MB", 128)),
			MaxMemoryMB:        int(s.Int("MICROVM_MAX_MEMORY_MB", 128)),
			DefaultCPUs:        int(s.Int("MICROVM_CPUS", 1)),
			MaxCPUs:            int(s.Int("MICROVM_MAX_CPUS", 1)),
			DefaultWorkspaceMB: int(s.Int("MICROVM_WORKSPACE_MB", 16)),
			MaxWorkspaceMB:     int(s.Int("MICROVM_MAX_WORKSPACE_MB", 16)),
		}
		switch cfg.Accel {
		case AccelAuto, AccelKVM, AccelTCG:
		default:
			s.Fail(fmt.Errorf("MICROVM_ACCEL %q: kvm, tcg or auto", cfg.Accel))
		}
		for _, pair := range [][2]int{{cfg.DefaultMemoryMB, cfg.MaxMemoryMB}, {cfg.DefaultCPUs, cfg.MaxCPUs}, {cfg.DefaultWorkspaceMB, cfg.MaxWorkspaceMB}} {
			if pair[0] > pair[1] {
				s.Fail(fmt.Errorf("microvm: a default (%s) over its maximum (%s)", strconv.Itoa(pair[0]), strconv.Itoa(pair[1])))
			}
		}
		if err := s.Err(); err != nil {
			return nil, err
		}
		p, err := New(cfg)
		if err != nil {
			return nil, err
		}
		return p, nil
	},
}
