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

// SecretNotified reports whether s's secret cache has had a notification
// with payload since its listener last (re)connected: notifications come
// in order on one connection, so once a payload sent last is seen, every
// earlier one was handled.
func SecretNotified(s *Service, payload string) bool {
	s.secretCache.mu.Lock()
	defer s.secretCache.mu.Unlock()
	return s.secretCache.gens[payload] > 0
}
