// tenant.go holds how a tenant's keys are told apart from another's under
// the master's --enable_multi_tenants: one rule, used by the master (which
// scopes every key a request names) and by whatever reads keys back.

package wire

import "strings"

// DefaultTenant is the tenant of a request that names none (Mooncake's
// TenantId default).
const DefaultTenant = "default"

// tenantSep separates a tenant from its key in a scoped key. A tenant
// name never holds a control character (ValidTenant), so the first NUL of
// a scoped key is always the separator, whatever the user's key holds.
const tenantSep = "\x00"

// MaxTenantLen bounds a tenant name's bytes: a name is held in every
// key of its tenant and labels its series.
const MaxTenantLen = 256

// ValidTenant reports whether name may name a tenant (Mooncake's rule):
// not empty, not starting with '_' (reserved), no control character;
// and at most MaxTenantLen bytes.
func ValidTenant(name string) bool {
	if name == "" || name[0] == '_' || len(name) > MaxTenantLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// TenantOrDefault is name, or DefaultTenant for "".
func TenantOrDefault(name string) string {
	if name == "" {
		return DefaultTenant
	}
	return name
}

// ScopeKey is key as the master stores it for tenant. The default
// tenant's keys stay as they are (so turning --enable_multi_tenants on
// keeps every stored object the default tenant's), unless the key holds
// a NUL: then it is scoped like any other tenant's, so that it can never
// be read as another tenant's scoped key.
func ScopeKey(tenant, key string) string {
	if tenant == DefaultTenant && !strings.Contains(key, tenantSep) {
		return key
	}
	return tenant + tenantSep + key
}

// SplitScoped is ScopeKey's inverse: the tenant and the user's key of a
// stored key.
func SplitScoped(stored string) (tenant, key string) {
	t, k, ok := strings.Cut(stored, tenantSep)
	if !ok {
		return DefaultTenant, stored
	}
	return t, k
}

// Tenanted is a request that carries its caller's tenant (setup's
// tenant_id). The client sets it on every request it sends; a master
// without --enable_multi_tenants ignores it.
type Tenanted interface {
	SetTenant(name string)
}

func (r *PutStartReq) SetTenant(name string)      { r.Tenant = name }
func (r *KeysReq) SetTenant(name string)          { r.Tenant = name }
func (r *RemoveReq) SetTenant(name string)        { r.Tenant = name }
func (r *RemoveByRegexReq) SetTenant(name string) { r.Tenant = name }
func (r *RemoveAllReq) SetTenant(name string)     { r.Tenant = name }
func (r *ReplicaClearReq) SetTenant(name string)  { r.Tenant = name }
func (r *CreateTaskReq) SetTenant(name string)    { r.Tenant = name }
func (r *QueryTaskReq) SetTenant(name string)     { r.Tenant = name }
