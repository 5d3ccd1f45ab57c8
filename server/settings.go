package server

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	tetherhttp "github.com/tetherhq/tether/internal/http"
)

// A setting is one environment variable of the configuration: its name,
// its default as docs/configuration.md shows it ("" for none, or for one
// worked out at start), a line on what it sets, and how it sets the
// configuration from a value. loadConfig gives set the variable's value,
// or the default when the variable is unset or empty; a value set refuses
// leaves the default in place. docs/configuration.md's table is checked
// against the settings, row by row (configdoc_test.go).
type setting struct {
	name string
	def  string
	doc  string
	set  func(c *config, v string) error
}

// duration is a setting of a positive Go duration.
func duration(name string, def time.Duration, doc string, field func(*config) *time.Duration) setting {
	return setting{name: name, def: formatDuration(def), doc: doc, set: func(c *config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%s=%q: want a positive Go duration such as 5s", name, v)
		}
		*field(c) = d
		return nil
	}}
}

// durationOrZero is a setting of a duration that is 0 (its default) or
// positive.
func durationOrZero(name, doc string, field func(*config) *time.Duration) setting {
	return setting{name: name, def: "0", doc: doc, set: func(c *config, v string) error {
		d, err := time.ParseDuration(v)
		if v == "0" {
			d, err = 0, nil
		}
		if err != nil || d < 0 {
			return fmt.Errorf("%s=%q: want 0 or a positive Go duration such as 24h", name, v)
		}
		*field(c) = d
		return nil
	}}
}

// count is a setting of a positive integer.
func count[T int | int64](name string, def T, doc string, field func(*config) *T) setting {
	return setting{name: name, def: strconv.FormatInt(int64(def), 10), doc: doc, set: func(c *config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("%s=%q: want a positive integer", name, v)
		}
		*field(c) = T(n)
		return nil
	}}
}

// quota is a setting of a tenant quota: a positive integer, or 0 for no
// limit (tetherhttp.NoLimit; 0 in the configuration is the default).
func quota(name string, def int, doc string, field func(*config) *int) setting {
	return setting{name: name, def: strconv.Itoa(def), doc: doc, set: func(c *config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%s=%q: want 0 (no limit) or a positive integer", name, v)
		}
		*field(c) = cmp.Or(n, tetherhttp.NoLimit)
		return nil
	}}
}

// countUpTo is a setting of an integer from 1 to most.
func countUpTo(name string, def, most int, doc string, field func(*config) *int) setting {
	return setting{name: name, def: strconv.Itoa(def), doc: doc, set: func(c *config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > most {
			return fmt.Errorf("%s=%q: want an integer from 1 to %d", name, v, most)
		}
		*field(c) = n
		return nil
	}}
}

// countOrZero is a setting of an integer where 0 means none (no limit,
// or one worked out from the host).
func countOrZero[T int | int64](name string, def T, doc string, field func(*config) *T) setting {
	return setting{name: name, def: strconv.FormatInt(int64(def), 10), doc: doc, set: func(c *config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%s=%q: want 0 or a positive integer", name, v)
		}
		*field(c) = T(n)
		return nil
	}}
}

// text is a setting of a string, blanks around it dropped; a blank value
// is the default.
func text(name, def, doc string, field func(*config) *string) setting {
	return setting{name: name, def: def, doc: doc, set: func(c *config, v string) error {
		*field(c) = cmp.Or(strings.TrimSpace(v), def)
		return nil
	}}
}

// verbatim is a setting of a string taken as it is (a secret, a URL).
func verbatim(name, doc string, field func(*config) *string) setting {
	return setting{name: name, doc: doc, set: func(c *config, v string) error {
		*field(c) = v
		return nil
	}}
}

// boolean is a setting of a boolean, false by default.
func boolean(name, doc string, field func(*config) *bool) setting {
	return setting{name: name, def: "false", doc: doc, set: func(c *config, v string) error {
		v = strings.TrimSpace(v)
		b, err := strconv.ParseBool(cmp.Or(v, "false"))
		if err != nil {
			return fmt.Errorf("%s=%q: want true or false", name, v)
		}
		*field(c) = b
		return nil
	}}
}

// formatDuration writes d as people write it: 1h, 5m, 30s, 1m30s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
