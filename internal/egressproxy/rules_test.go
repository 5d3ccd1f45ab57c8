package egressproxy

import (
	"net/netip"
	"strings"
	"testing"
)

// TestParseRule: names, wildcards, IPv4 and IPv6 addresses and CIDRs,
// each with an optional port; what no sandbox reaches is refused, and
// loopback and link-local only without EGRESS_ALLOW_PRIVATE.
func TestParseRule(t *testing.T) {
	t.Parallel()
	pool := netip.MustParsePrefix("10.250.0.0/16")
	ps := Parser{Denied: []netip.Prefix{pool}}
	good := map[string]Rule{
		"pypi.org":               {name: "pypi.org"},
		"PyPI.org:443":           {name: "pypi.org", port: 443},
		"*.pythonhosted.org":     {name: ".pythonhosted.org", wildcard: true},
		"*.example.com:8443":     {name: ".example.com", wildcard: true, port: 8443},
		"1.2.3.4":                {prefix: netip.MustParsePrefix("1.2.3.4/32")},
		"1.2.3.0/24:80":          {prefix: netip.MustParsePrefix("1.2.3.0/24"), port: 80},
		"0.0.0.0/0":              {prefix: netip.MustParsePrefix("0.0.0.0/0")},
		"10.0.0.0/8":             {prefix: netip.MustParsePrefix("10.0.0.0/8")},
		"2606:4700::1111":        {prefix: netip.MustParsePrefix("2606:4700::1111/128")},
		"[2606:4700::1111]:443":  {prefix: netip.MustParsePrefix("2606:4700::1111/128"), port: 443},
		"2606:4700::/32":         {prefix: netip.MustParsePrefix("2606:4700::/32")},
		"[fd00::/8]:5432":        {prefix: netip.MustParsePrefix("fd00::/8"), port: 5432},
		"::/0":                   {prefix: netip.MustParsePrefix("::/0")},
		"xn--bcher-kva.example":  {name: "xn--bcher-kva.example"},
		"a-b.c-d.example.com:22": {name: "a-b.c-d.example.com", port: 22},
	}
	for in, want := range good {
		got, err := ps.ParseRule(in)
		want.Text = strings.ToLower(in)
		if err != nil || got != want {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                   "empty",
		"pypi":               "fully qualified",
		"*.com":              "two labels",
		"*":                  "fully qualified",
		"a.*.example.com":    "not a host name",
		"**.example.com":     "not a host name",
		"pypi.org:0":         "port",
		"pypi.org:65536":     "port",
		"pypi.org:":          "port",
		"[2606:4700::1]:":    "port",
		"[2606:4700::1":      "bracketed",
		"[1.2.3.4]:80":       "brackets",
		"10.0.0.1/8":         "did you mean 10.0.0.0/8",
		"1.2.3.4/33":         "CIDR",
		"::ffff:1.2.3.4":     "IPv4-mapped",
		"::ffff:0:0/96":      "IPv4-mapped",
		"127.0.0.1":          "EGRESS_ALLOW_PRIVATE",
		"[::1]:80":           "EGRESS_ALLOW_PRIVATE",
		"169.254.0.0/16":     "EGRESS_ALLOW_PRIVATE",
		"fe80::/10":          "EGRESS_ALLOW_PRIVATE",
		"169.254.169.254":    "never reach",
		"fd00:ec2::254":      "never reach",
		"224.0.0.1":          "never reach",
		"0.0.0.0":            "never reach",
		"2001:db8::/32":      "never reach",
		"2002:7f00:1::":      "never reach", // 6to4 of 127.0.0.1
		"10.250.3.0/24":      "never reach", // the pool
		"fe80::1%eth0":       "not a host name",
		"under_score.org":    "not a host name",
		"1.2.3":              "not a host name",
		"pypi.org.":          "not a host name",
		"https://pypi.org":   "port",
		"pypi.org extra:443": "not a host name",
	}
	for in, want := range bad {
		if _, err := ps.ParseRule(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRule(%q) = %v; want an error saying %q", in, err, want)
		}
	}
	private := Parser{AllowPrivate: true, Denied: []netip.Prefix{pool}}
	for _, in := range []string{"127.0.0.1:8080", "[::1]:80", "169.254.10.0/24"} {
		if _, err := private.ParseRule(in); err != nil {
			t.Errorf("with private addresses allowed, ParseRule(%q) = %v", in, err)
		}
	}
	for _, in := range []string{"169.254.169.254", "10.250.0.0/24", "224.0.0.0/4"} {
		if _, err := private.ParseRule(in); err == nil {
			t.Errorf("with private addresses allowed, ParseRule(%q) passed", in)
		}
	}
	if _, err := ps.Parse(make([]string, MaxRules+1)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a list too long: %v", err)
	}
	if _, err := ps.Parse([]string{"pypi.org", "bad_name.org"}); err == nil || !strings.HasPrefix(err.Error(), `[1] "bad_name.org"`) {
		t.Errorf("a bad second entry: %v; want it named by its index", err)
	}
}

// TestWildcard: *.name matches every name below name, however deep, and
// never name itself nor a name that only ends with the same letters.
func TestWildcard(t *testing.T) {
	t.Parallel()
	r, err := Parser{}.ParseRule("*.pythonhosted.org")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"files.pythonhosted.org": true, "a.b.pythonhosted.org": true,
		"pythonhosted.org": false, "evilpythonhosted.org": false, "pythonhosted.org.evil.com": false,
		"files.pythonhosted.org.evil.com": false, "files.pythonhosted.com": false,
	} {
		if got := r.matchName(name, 443); got != want {
			t.Errorf("*.pythonhosted.org matches %s: %v; want %v", name, got, want)
		}
	}
	p443, _ := Parser{}.ParseRule("pypi.org:443")
	if !p443.matchName("pypi.org", 443) || p443.matchName("pypi.org", 80) || p443.matchName("www.pypi.org", 443) {
		t.Error("pypi.org:443 matches what it should not, or not what it should")
	}
}

// TestCheckCredential: a credential names one host, a header that neither
// frames the request nor names its destination, and no line breaks.
func TestCheckCredential(t *testing.T) {
	t.Parallel()
	ok := []Credential{
		{Host: "api.example.com", Header: "Authorization", Format: "Bearer {secret}", Secret: "s"},
		{Host: "api.example.com", Header: "X-Api-Key", Secret: "s"},
		{Host: "github.com", Username: "x-access-token", Secret: "s"},
	}
	for _, c := range ok {
		if err := CheckCredential(c); err != nil {
			t.Errorf("CheckCredential(%+v) = %v", c, err)
		}
	}
	bad := []Credential{
		{Host: "*.example.com", Header: "X-Key", Secret: "s"},
		{Host: "api.example.com", Header: "Host", Secret: "s"},
		{Host: "api.example.com", Header: "Content-Length", Secret: "s"},
		{Host: "api.example.com", Header: "X Key", Secret: "s"},
		{Host: "api.example.com", Header: "X-Key", Format: "Bearer", Secret: "s"},
		{Host: "api.example.com", Header: "X-Key", Format: "{secret}{secret}", Secret: "s"},
		{Host: "api.example.com", Header: "X-Key", Secret: "s\r\nX-Evil: 1"},
		{Host: "github.com", Username: "a:b", Secret: "s"},
		{Host: "github.com", Username: "a", Format: "{secret}", Secret: "s"},
	}
	for _, c := range bad {
		if err := CheckCredential(c); err == nil {
			t.Errorf("CheckCredential(%+v) passed", c)
		}
	}
	if v := (Credential{Format: "Bearer {secret}", Secret: "t0k"}).value(); v != "Bearer t0k" {
		t.Errorf("value = %q", v)
	}
	if v := (Credential{Username: "u", Secret: "p"}).value(); v != "Basic dTpw" {
		t.Errorf("basic value = %q", v)
	}
}

// TestParseHosts: EGRESS_HOSTS is name=address pairs; a name may repeat.
func TestParseHosts(t *testing.T) {
	t.Parallel()
	got, err := ParseHosts("pypi.org=192.0.2.10, files.pythonhosted.org=192.0.2.11,pypi.org=2001:db8::10 PyPI.org.=::ffff:192.0.2.12")
	if err != nil {
		t.Fatal(err)
	}
	if a := got["pypi.org"]; len(a) != 3 || a[0].String() != "192.0.2.10" || a[2].String() != "192.0.2.12" ||
		len(got["files.pythonhosted.org"]) != 1 {
		t.Errorf("ParseHosts = %v", got)
	}
	for _, bad := range []string{"pypi.org", "pypi.org=", "=1.2.3.4", "pypi=1.2.3.4", "pypi.org=1.2.3", "pypi.org=fe80::1%eth0"} {
		if _, err := ParseHosts(bad); err == nil {
			t.Errorf("ParseHosts(%q) passed", bad)
		}
	}
}
