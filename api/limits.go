package api

import (
	"net/http"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"
)

func (h *handlers) setProjectLimits(c *gin.Context) {
	var req types.Limits
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	v, err := h.core.SetProjectLimits(c.Request.Context(), principal(c), c.Param("p"), req)
	respond(c, http.StatusOK, v, err)
}
