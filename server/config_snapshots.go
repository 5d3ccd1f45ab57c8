package server

import (
	"fmt"
	"strings"
	"time"

	tetherhttp "github.com/tetherhq/tether/internal/http"
	"github.com/tetherhq/tether/internal/lifecycle"
)

// snapshotSettings are the SNAPSHOT_* settings, EXIT_SNAPSHOT_TIMEOUT and
// DEFAULT_ON_END: the API's (config.HTTP) and the executor's exit
// snapshots' (config.Executor). docs/snapshots.md explains them.
var snapshotSettings = []setting{
	duration("SNAPSHOT_TIMEOUT", tetherhttp.DefaultSnapshotTimeout, "how long a snapshot may take to be taken before it fails",
		func(c *config) *time.Duration { return &c.HTTP.SnapshotTimeout }),
	{name: "SNAPSHOT_RETENTION", def: "0", doc: "how long a snapshot is kept before the janitor deletes it (0: until deleted)",
		set: func(c *config, v string) error {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if v = strings.TrimSpace(v); v == "" || v == "0" {
				d, err = 0, nil
			}
			if err != nil || d < 0 {
				return fmt.Errorf("SNAPSHOT_RETENTION=%q: want 0 or a positive Go duration such as 168h", v)
			}
			c.HTTP.SnapshotRetention, c.Executor.SnapshotRetention = d, d
			return nil
		}},
	{name: "SNAPSHOT_MAX_PER_TENANT", def: fmt.Sprint(tetherhttp.DefaultSnapshotMaxPerTenant), doc: "creating and ready snapshots a tenant may hold (0: no limit)",
		set: func(c *config, v string) error {
			err := countOrZero("SNAPSHOT_MAX_PER_TENANT", 0, "", func(c *config) *int { return &c.HTTP.SnapshotMaxPerTenant }).set(c, v)
			c.Executor.SnapshotMaxCount = c.HTTP.SnapshotMaxPerTenant
			return err
		}},
	{name: "SNAPSHOT_MAX_BYTES_PER_TENANT", def: "0", doc: "bytes a tenant's snapshots may hold (0: no limit)",
		set: func(c *config, v string) error {
			err := countOrZero("SNAPSHOT_MAX_BYTES_PER_TENANT", int64(0), "", func(c *config) *int64 { return &c.HTTP.SnapshotMaxBytesPerTenant }).set(c, v)
			c.Executor.SnapshotMaxBytes = c.HTTP.SnapshotMaxBytesPerTenant
			return err
		}},
	duration("EXIT_SNAPSHOT_TIMEOUT", lifecycle.DefaultExitSnapshotTimeout, "how long a release waits for its sandbox's exit snapshot",
		func(c *config) *time.Duration { return &c.Executor.ExitSnapshotTimeout }),
	{name: "DEFAULT_ON_END", def: "none", doc: "on_end of a create that names none: snapshot or none",
		set: func(c *config, v string) error {
			switch v = strings.TrimSpace(v); v {
			case "", "none":
				c.HTTP.DefaultOnEnd = ""
			case "snapshot":
				c.HTTP.DefaultOnEnd = v
			default:
				return fmt.Errorf("DEFAULT_ON_END=%q: want snapshot or none", v)
			}
			return nil
		}},
}
