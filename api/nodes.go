package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/api/types"
)

// ClusterCore is the cluster's membership as the API shows it (admin only),
// and the placement of new instances.
type ClusterCore interface {
	ListNodes(ctx context.Context, p types.Principal) ([]types.Node, error)
	GetNode(ctx context.Context, p types.Principal, name string) (types.Node, error)
	// CordonNode stops placements on a node; UncordonNode makes a
	// cordoned, drained or draining node ready again; DrainNode stops
	// placements and has the node hibernate its instances, then marks it
	// drained.
	CordonNode(ctx context.Context, p types.Principal, name string) (types.Node, error)
	UncordonNode(ctx context.Context, p types.Principal, name string) (types.Node, error)
	DrainNode(ctx context.Context, p types.Principal, name string) (types.Node, error)
	// JoinCommand is the `envd serve` line another machine runs to join.
	JoinCommand(ctx context.Context, p types.Principal) (types.JoinCommand, error)
	// PlaceInstance picks the node of a new instance of project: local
	// when this node takes it, else the node's name and API URL; reason
	// is the decision in words.
	PlaceInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest) (node, apiURL, reason string, local bool, err error)
	// SetProjectCheckpoint and GetProjectCheckpoint: how often the
	// project's running retained instances are checkpointed.
	SetProjectCheckpoint(ctx context.Context, p types.Principal, project string, c types.CheckpointSetting) (types.CheckpointSetting, error)
	GetProjectCheckpoint(ctx context.Context, p types.Principal, project string) (types.CheckpointSetting, error)
	// OperationOwner is the node that runs operation id and its API URL,
	// or local when this node answers its cancel.
	OperationOwner(ctx context.Context, p types.Principal, id string) (node, apiURL string, local bool, err error)
}

// PlacementHeader carries the placement decision of a create forwarded to
// the chosen node, which records it on the instance.
const PlacementHeader = "X-Envd-Placement"

type nodes struct{ core ClusterCore }

func (g nodes) routes() []route {
	verb := func(call func(ctx context.Context, p types.Principal, name string) (types.Node, error)) gin.HandlerFunc {
		return handle(http.StatusOK, func(r in, _ none) (types.Node, error) { return call(r.ctx, r.p, r.param("name")) })
	}
	return []route{
		{http.MethodGet, "/nodes", handle(http.StatusOK, func(r in, _ none) (types.NodeList, error) {
			ns, err := items(g.core.ListNodes(r.ctx, r.p))
			return types.NodeList{Nodes: ns}, err
		})},
		{http.MethodGet, "/nodes/:name", verb(g.core.GetNode)},
		{http.MethodPost, "/nodes/:name/cordon", verb(g.core.CordonNode)},
		{http.MethodPost, "/nodes/:name/uncordon", verb(g.core.UncordonNode)},
		{http.MethodPost, "/nodes/:name/drain", verb(g.core.DrainNode)},
		{http.MethodPut, "/projects/:p/checkpoint", handle(http.StatusOK, func(r in, req types.CheckpointSetting) (types.CheckpointSetting, error) {
			return g.core.SetProjectCheckpoint(r.ctx, r.p, r.param("p"), req)
		})},
		{http.MethodGet, "/projects/:p/checkpoint", handle(http.StatusOK, func(r in, _ none) (types.CheckpointSetting, error) {
			return g.core.GetProjectCheckpoint(r.ctx, r.p, r.param("p"))
		})},
		{http.MethodGet, "/cluster/join-command", handle(http.StatusOK, func(r in, _ none) (types.JoinCommand, error) {
			return g.core.JoinCommand(r.ctx, r.p)
		})},
	}
}

// placeCreate places POST /v1/projects/{p}/instances (place) and sends
// the cancel of an operation to the node that runs it (the node that
// runs it is the one that can stop its work); it lets every other request
// through.
func placeCreate(core ClusterCore, fw forwarder) gin.HandlerFunc {
	p := place(core, fw)
	return func(c *gin.Context) {
		switch {
		case c.Request.Method == http.MethodPost && c.FullPath() == "/v1/projects/:p/instances":
			p(c)
		case c.Request.Method == http.MethodDelete && c.FullPath() == "/v1/operations/:id" && c.GetHeader(ForwardedHeader) == "":
			id := c.Param("id")
			node, apiURL, local, err := core.OperationOwner(c.Request.Context(), principal(c), id)
			switch {
			case err != nil:
				writeError(c, err)
			case local:
				c.Next()
			default:
				c.Abort()
				forwardTo(c.Writer, c.Request, fw, "operation "+id, node, apiURL, false, func(err error) { writeError(c, err) })
			}
		default:
			c.Next()
		}
	}
}

// place sends a create (or restore) of an instance to the node placement
// picks, with the decision in PlacementHeader; a create that was
// forwarded here already, or that this node takes, goes on to the local
// handler with the decision in the header too.
func place(core ClusterCore, fw forwarder) gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.GetHeader(ForwardedHeader) != "" {
			if reason := c.GetHeader(PlacementHeader); reason != "" {
				c.Request = c.Request.WithContext(types.WithPlacement(c.Request.Context(), reason))
			}
			c.Next()
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, MaxJSONBody))
		if err != nil {
			writeError(c, describeJSONError(err))
			return
		}
		c.Request.Body = io.NopCloser(bytes.NewReader(body))
		var req types.CreateInstanceRequest
		if len(bytes.TrimSpace(body)) > 0 {
			// A body the local handler refuses is refused there, with its message.
			if json.Unmarshal(body, &req) != nil {
				c.Next()
				return
			}
		}
		node, apiURL, reason, local, err := core.PlaceInstance(c.Request.Context(), principal(c), c.Param("p"), req)
		if err != nil {
			writeError(c, err)
			return
		}
		c.Request.Header.Set(PlacementHeader, reason)
		if local {
			c.Request = c.Request.WithContext(types.WithPlacement(c.Request.Context(), reason))
			c.Next()
			return
		}
		c.Abort()
		c.Request.Body = io.NopCloser(bytes.NewReader(body))
		c.Request.ContentLength = int64(len(body))
		forwardTo(c.Writer, c.Request, fw, "new instance", node, apiURL, false, func(err error) { writeError(c, err) })
	}
}
