package types

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

// InstanceVerb is a lifecycle verb of the plain shape: POST
// /v1/instances/{id}/{Name}, no request body, answered with the instance
// in the state the verb left it in. An illegal transition is a 409
// failed_precondition whose details hold the current "state".
//
// Verbs with a body (renew, hibernate) or another answer (save, fork) are
// not of this shape and are not in InstanceVerbs.
type InstanceVerb struct {
	// Name is the last segment of the verb's path and envctl's command.
	Name string `json:"name"`
	// From are the states the verb may start from: the console offers the
	// verb in these. The core decides; this is what it is documented to
	// accept.
	From []InstanceState `json:"from"`
	// To is the state the verb leaves the instance in when it succeeds.
	To InstanceState `json:"to"`
	// Summary is one line for envctl's help and the console's title.
	Summary string `json:"summary"`
}

// instanceVerbsJSON is the one list of the plain verbs. It is a JSON file
// rather than a Go literal so that the console (web/src) and the SDKs'
// coverage tests read the same list the API serves, without a generator.
//
//go:embed instance_verbs.json
var instanceVerbsJSON []byte

// InstanceVerbs are the plain instance verbs, in the order envctl and the
// console list them. The API serves one route per entry, the Go client's
// InstanceVerb and the SDKs' instanceVerb call any of them, envctl has a
// command per entry and the console a button per entry the state allows.
var InstanceVerbs = mustInstanceVerbs(instanceVerbsJSON)

// mustInstanceVerbs parses the embedded list; it is part of the binary, so
// a bad list fails every test rather than a request.
func mustInstanceVerbs(b []byte) []InstanceVerb {
	var vs []InstanceVerb
	if err := json.Unmarshal(b, &vs); err != nil {
		panic(fmt.Sprintf("instance_verbs.json: %v", err))
	}
	return vs
}

// LookupInstanceVerb returns the plain verb called name.
func LookupInstanceVerb(name string) (InstanceVerb, bool) {
	for _, v := range InstanceVerbs {
		if v.Name == name {
			return v, true
		}
	}
	return InstanceVerb{}, false
}
