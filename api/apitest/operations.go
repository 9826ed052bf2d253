package apitest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Operations is the fake OperationCore: an in-memory log per operation,
// which the other fakes add to when they start an operation and tests
// drive with AppendEvent and Finish.
type Operations struct {
	*Recorder
	mu   sync.Mutex
	ops  map[string]*opLog
	nOps int
}

type opLog struct {
	op     types.Operation
	events []types.Event
}

// NewOperation adds a running operation and returns it.
func (c *Operations) NewOperation(kind types.OpKind, target string) types.Operation {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nOps++
	op := types.Operation{
		ID: fmt.Sprintf("op-%d", c.nOps), Kind: kind, Target: target, State: types.OpRunning,
		CreatedAt: Epoch, UpdatedAt: Epoch,
	}
	c.ops[op.ID] = &opLog{op: op}
	return op
}

// AppendEvent appends an event to the operation's log and returns it. It
// panics when the operation does not exist.
func (c *Operations) AppendEvent(id, typ, message string) types.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.ops[id]
	ev := types.Event{Seq: len(l.events) + 1, At: Epoch, Type: typ, Message: message}
	l.events = append(l.events, ev)
	return ev
}

// Finish moves the operation to a terminal state with a result (marshalled
// to JSON when not nil) or an error.
func (c *Operations) Finish(id string, state types.OpState, result any, opErr *types.OpError) types.Operation {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.ops[id]
	l.op.State = state
	l.op.Error = opErr
	if result != nil {
		b, err := json.Marshal(result)
		if err != nil {
			panic(err)
		}
		l.op.Result = b
	}
	return l.op
}

// opLog returns the log of operation id under c.mu.
func (c *Operations) opLog(id string) (*opLog, error) {
	l, ok := c.ops[id]
	if !ok {
		return nil, fmt.Errorf("operation %q: %w", id, errdefs.ErrNotFound)
	}
	return l, nil
}

func (c *Operations) GetOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error) {
	c.record("GetOperation", p, id)
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.opLog(id)
	if err != nil {
		return types.Operation{}, err
	}
	return l.op, nil
}

// CancelOperation moves a running operation to canceled.
func (c *Operations) CancelOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error) {
	c.record("CancelOperation", p, id)
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.opLog(id)
	if err != nil {
		return types.Operation{}, err
	}
	if !l.op.Done() {
		l.op.State = types.OpCanceled
		l.events = append(l.events, types.Event{Seq: len(l.events) + 1, At: Epoch, Type: "canceled", Message: "canceled by request"})
	}
	return l.op, nil
}

func (c *Operations) OperationEvents(ctx context.Context, p types.Principal, id string, after int) ([]types.Event, error) {
	c.record("OperationEvents", p, id, after)
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.opLog(id)
	if err != nil {
		return nil, err
	}
	var out []types.Event
	for _, ev := range l.events {
		if ev.Seq > after {
			out = append(out, ev)
		}
	}
	return out, nil
}
