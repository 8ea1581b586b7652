// tenants.go gives each tenant its own key space under
// --enable_multi_tenants: the handlers of the requests that name keys
// turn each key into its stored form (wire.ScopeKey) before the core sees
// it, and the keys they answer with back into the caller's. Without the
// flag every request is the default tenant's and no key is touched.

package server

import (
	"net/http"

	"github.com/gostore/gostore/gostore/wire"
)

// tenantOf is the tenant a request acts for: its own, the default one
// for "" or without --enable_multi_tenants ("" then: nothing is scoped).
// A name Mooncake would refuse is refused whole (-600).
func (s *Server) tenantOf(name string) (string, error) {
	if !s.opts.EnableMultiTenants {
		return "", nil
	}
	name = wire.TenantOrDefault(name)
	if !wire.ValidTenant(name) {
		return "", wire.Errorf(wire.ErrInvalidParams, "tenant_id %q: empty, starting with '_', holding a control character or over 256 bytes", name)
	}
	return name, nil
}

// scope rewrites keys (the request's own, decoded for this call) in place
// into tenant's stored keys.
func (s *Server) scope(tenant string, keys []string) error {
	t, err := s.tenantOf(tenant)
	if err != nil || t == "" {
		return err
	}
	for i, k := range keys {
		keys[i] = wire.ScopeKey(t, k)
	}
	return nil
}

// unscope rewrites stored keys in place into their tenant's own keys (the
// caller's: every key a handler answers with is the caller's tenant's).
func (s *Server) unscope(keys []string) {
	if !s.opts.EnableMultiTenants {
		return
	}
	for i, k := range keys {
		_, keys[i] = wire.SplitScoped(k)
	}
}

// httpKey is an HTTP query's key as stored: scoped by the query's
// ?tenant_id= (the default tenant without it).
func (s *Server) httpKeys(r *http.Request, keys []string) error {
	return s.scope(r.URL.Query().Get("tenant_id"), keys)
}
