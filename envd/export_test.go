package envd

import (
	"strconv"
	"strings"
)

// SecretCacheOff turns s's egress secret cache off until its listener
// reconnects: every lookup asks the database, as before the cache
// (BenchmarkSecretHeaders' baseline).
func SecretCacheOff(s *Service) { s.secretCache.setLive(false) }

// SecretsCached reports whether the cache holds the bound secrets of
// gateway key's tenant.
func SecretsCached(s *Service, key string) bool {
	n, ok := strings.CutPrefix(key, "project:")
	if !ok {
		return false
	}
	id, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return false
	}
	t, ok, _ := s.secretCache.tenantOf(id)
	if !ok {
		return false
	}
	_, ok, _ = s.secretCache.boundSecrets(t)
	return ok
}
