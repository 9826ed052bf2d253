package api

import (
	"net/http"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"
)

func (h *handlers) setProjectNetwork(c *gin.Context) {
	var req types.ProjectNetwork
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	v, err := h.core.SetProjectNetwork(c.Request.Context(), principal(c), c.Param("p"), req)
	respond(c, http.StatusOK, v, err)
}
