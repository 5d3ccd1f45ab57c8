package server

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	tetherhttp "github.com/tetherhq/tether/internal/http"
)

// previewSettings are the PREVIEW_* settings: where preview URLs point
// and how long they last (config.HTTP). docs/ports.md explains them.
var previewSettings = []setting{
	{name: "PREVIEW_BASE_URL", doc: "Tether's external address, which preview URLs begin with (default: the request's)",
		set: func(c *config, v string) error {
			v = strings.TrimSpace(v)
			if v == "" {
				c.HTTP.PreviewBaseURL = ""
				return nil
			}
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
				return fmt.Errorf("PREVIEW_BASE_URL=%q: want an absolute http or https URL without a query, such as https://tether.example.com", v)
			}
			c.HTTP.PreviewBaseURL = strings.TrimSuffix(v, "/")
			return nil
		}},
	duration("PREVIEW_TTL", tetherhttp.DefaultPreviewTTL, "how long a preview URL works when its create asks for no ttl_seconds",
		func(c *config) *time.Duration { return &c.HTTP.PreviewTTL }),
	duration("PREVIEW_MAX_TTL", tetherhttp.DefaultPreviewMaxTTL, "the longest ttl_seconds a preview may ask for",
		func(c *config) *time.Duration { return &c.HTTP.PreviewMaxTTL }),
	{name: "PREVIEW_HOST", doc: "wildcard host mode: previews are {port}-{sandbox}.PREVIEW_HOST (a DNS name whose wildcard points at Tether)",
		set: func(c *config, v string) error {
			v = strings.ToLower(strings.TrimSpace(v))
			if v != "" && !previewHostPattern.MatchString(v) {
				return fmt.Errorf("PREVIEW_HOST=%q: want a DNS name such as preview.example.com (its wildcard, *.preview.example.com, points at Tether)", v)
			}
			c.HTTP.PreviewHost = v
			return nil
		}},
	boolean("E2B_DISABLED", "turn off E2B's protocol, served under /e2b (docs/e2b.md)",
		func(c *config) *bool { return &c.HTTP.E2BDisabled }),
	{name: "E2B_DOMAIN", doc: "serve E2B's sandbox hosts, {port}-{sandbox}.E2B_DOMAIN (getHost), and answer it as E2B's domain; may be PREVIEW_HOST",
		set: func(c *config, v string) error {
			v = strings.ToLower(strings.TrimSpace(v))
			if v != "" && !previewHostPattern.MatchString(v) {
				return fmt.Errorf("E2B_DOMAIN=%q: want a DNS name such as e2b.example.com (its wildcard, *.e2b.example.com, points at Tether)", v)
			}
			c.HTTP.E2BDomain = v
			return nil
		}},
}

// previewHostPattern is a DNS name of at least two labels.
var previewHostPattern = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// checkPreviewTTL is the check across the preview settings.
func checkPreviewTTL(c config) error {
	if c.HTTP.PreviewTTL > c.HTTP.PreviewMaxTTL {
		return fmt.Errorf("PREVIEW_TTL=%s is over PREVIEW_MAX_TTL=%s", c.HTTP.PreviewTTL, c.HTTP.PreviewMaxTTL)
	}
	return nil
}

// checkE2BDomain refuses E2B's sandbox hosts without E2B's protocol.
func checkE2BDomain(c config) error {
	if c.HTTP.E2BDomain != "" && c.HTTP.E2BDisabled {
		return fmt.Errorf("E2B_DOMAIN=%s serves E2B's sandbox hosts, but E2B_DISABLED=true turns E2B's protocol off: unset one", c.HTTP.E2BDomain)
	}
	return nil
}
