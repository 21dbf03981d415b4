package format

import (
	"fmt"

	"github.com/hamba/avro/v2"
)

// parseAvro parses the references first into a cache of their own, so
// the schema may use the named types they define, and no name leaks into
// another parse (avro.DefaultSchemaCache is global).
func parseAvro(text string, refs []Ref) (avro.Schema, error) {
	cache := &avro.SchemaCache{}
	for _, r := range refs {
		if _, err := avro.ParseWithCache(r.Text, "", cache); err != nil {
			return nil, fmt.Errorf("reference %q: %w", r.Name, err)
		}
	}
	return avro.ParseWithCache(text, "", cache)
}

// checkAvro is the Avro specification's schema resolution, as hamba/avro
// checks it.
func checkAvro(reader, writer avro.Schema) []string {
	if err := avro.NewSchemaCompatibility().Compatible(reader, writer); err != nil {
		return []string{err.Error()}
	}
	return nil
}
