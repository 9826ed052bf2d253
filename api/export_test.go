package api

import (
	"net/http"
	"time"
)

// SignForwarded signs r as a node of the cluster with key would forward it.
func SignForwarded(key []byte, r *http.Request) { signForwarded(key, r, time.Now()) }
