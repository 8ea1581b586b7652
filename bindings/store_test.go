package main

import (
	"testing"

	"github.com/gostore/gostore/gostore/wire"
)

// setup's JSON carries tenant_id and the client HTTP server's settings
// into client.Config: the port only when the server is on, and then only
// a valid one; the dict form's text values read as Mooncake reads them.
func TestParseSetupTenantAndHTTP(t *testing.T) {
	base := `"local_hostname":"127.0.0.1","master_server_addr":"127.0.0.1:1"`
	for _, c := range []struct {
		extra  string
		tenant string
		port   int
		code   wire.Code
	}{
		{``, "", 0, wire.OK},
		{`,"tenant_id":"team-a"`, "team-a", 0, wire.OK},
		{`,"enable_client_http_server":true`, "", 9300, wire.OK},
		{`,"enable_client_http_server":true,"client_http_port":9400`, "", 9400, wire.OK},
		{`,"enable_client_http_server":false,"client_http_port":-1`, "", 0, wire.OK},
		{`,"client_http_port":70000`, "", 0, wire.OK},
		{`,"enable_client_http_server":true,"client_http_port":0`, "", 0, wire.ErrInvalidParams},
		{`,"enable_client_http_server":true,"client_http_port":65536`, "", 0, wire.ErrInvalidParams},
		{`,"enable_client_http_server":" Yes","client_http_port":" 9401"`, "", 9401, wire.OK},
		{`,"enable_client_http_server":"ON","client_http_port":"09402"`, "", 9402, wire.OK},
		{`,"enable_client_http_server":"off","client_http_port":9403`, "", 0, wire.OK},
		{`,"enable_client_http_server":"2","client_http_port":9404`, "", 0, wire.OK}, // not a bool: false
		{`,"client_http_port":"x"`, "", 0, wire.ErrInvalidParams},
		{`,"client_http_port":"+9300"`, "", 0, wire.ErrInvalidParams},
		{`,"client_http_port":"9300.0"`, "", 0, wire.ErrInvalidParams},
		{`,"client_http_port":true`, "", 0, wire.ErrInvalidParams},
		{`,"client_http_port":null`, "", 0, wire.ErrInvalidParams},
		{`,"client_http_port":1.5`, "", 0, wire.ErrInvalidParams},
		{`,"tenant_id":5`, "", 0, wire.ErrInvalidParams},
		{`,"ipc_socket_path":"/tmp/x.sock"`, "", 0, wire.OK},
	} {
		cfg, _, err := parseSetup([]byte(`{` + base + c.extra + `}`))
		if code := wire.CodeOf(err); code != c.code {
			t.Errorf("%s: %v, want code %d", c.extra, err, c.code)
			continue
		}
		if err == nil && (cfg.TenantID != c.tenant || cfg.HTTPPort != c.port) {
			t.Errorf("%s: tenant %q port %d, want %q %d", c.extra, cfg.TenantID, cfg.HTTPPort, c.tenant, c.port)
		}
	}
}

// enable_ssd_offload reads like the other flag: a bool from the
// positional form, text from the dict form; a path alone turns it on.
func TestParseSetupSSDFlag(t *testing.T) {
	for _, c := range []struct {
		extra string
		on    bool
	}{
		{`"enable_ssd_offload":true`, true},
		{`"enable_ssd_offload":"YES"`, true},
		{`"enable_ssd_offload":"off","ssd_offload_path":"/d"`, false},
		{`"enable_ssd_offload":"2"`, false},
		{`"ssd_offload_path":"/d"`, true},
	} {
		cfg, _, err := parseSetup([]byte(`{"local_hostname":"h",` + c.extra + `}`))
		if err != nil || cfg.EnableSSDOffload != c.on {
			t.Errorf("%s: on=%v err=%v, want on=%v", c.extra, cfg.EnableSSDOffload, err, c.on)
		}
	}
}
