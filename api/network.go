package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/envd"
)

func (h *handlers) setProjectNetwork(c *gin.Context) {
	var req envd.ProjectNetwork
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	v, err := h.core.SetProjectNetwork(c.Request.Context(), principal(c), c.Param("p"), req)
	respond(c, http.StatusOK, v, err)
}
