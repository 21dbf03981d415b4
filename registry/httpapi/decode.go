package httpapi

import (
	"encoding/json"
	"fmt"

	"strata/registry"
	"strata/registry/format"
)

// schemaRequest is the body of a registration, a lookup and a
// compatibility check. Fields Confluent added later (metadata, ruleSet)
// are read past: strata keeps none of them yet.
type schemaRequest struct {
	Schema     string               `json:"schema"`
	SchemaType string               `json:"schemaType"`
	References []registry.Reference `json:"references"`
	// ID and Version: the client's own, which IMPORT mode takes.
	ID      int `json:"id"`
	Version int `json:"version"`
}

func (q schemaRequest) schema() registry.Schema {
	return registry.Schema{Type: format.Type(q.SchemaType), Text: q.Schema, References: q.References}
}

func decodeSchemaRequest(body []byte) (schemaRequest, error) {
	var q schemaRequest
	if err := json.Unmarshal(body, &q); err != nil {
		return schemaRequest{}, registry.Unprocessable(fmt.Sprintf(`the body is not a schema request {"schema": "...", "schemaType": "...", "references": [...]}: %v`, err))
	}
	return q, nil
}

// decodeLevel reads PUT /config's body, {"compatibility": LEVEL}.
func decodeLevel(body []byte) (registry.Level, error) {
	var q struct {
		Compatibility string `json:"compatibility"`
	}
	if err := json.Unmarshal(body, &q); err != nil {
		return "", registry.Unprocessable(fmt.Sprintf(`the body is not {"compatibility": LEVEL}: %v`, err))
	}
	return registry.ParseLevel(q.Compatibility)
}

// decodeMode reads PUT /mode's body, {"mode": MODE}.
func decodeMode(body []byte) (registry.Mode, error) {
	var q struct {
		Mode string `json:"mode"`
	}
	if err := json.Unmarshal(body, &q); err != nil {
		return "", registry.Unprocessable(fmt.Sprintf(`the body is not {"mode": MODE}: %v`, err))
	}
	return registry.ParseMode(q.Mode)
}
