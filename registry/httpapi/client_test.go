package httpapi

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

// franz-go's registry client, as applications use it, against the API on
// a real listener: register, look up by id and by schema, versions,
// compatibility, levels, modes and deletes.
func TestFranzGoClient(t *testing.T) {
	srv, _ := serve(t)
	ctx := context.Background()
	cl, err := sr.NewClient(sr.URLs(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	types, err := cl.SupportedTypes(ctx)
	if err != nil || len(types) != 3 {
		t.Fatalf("supported types: %v, %v", types, err)
	}
	v1 := sr.Schema{Schema: avroV1}
	ss, err := cl.CreateSchema(ctx, "orders-value", v1)
	if err != nil || ss.ID != 1 || ss.Version != 1 || ss.Subject != "orders-value" {
		t.Fatalf("create: %+v, %v", ss, err)
	}
	byID, err := cl.SchemaByID(ctx, ss.ID)
	if err != nil || byID.Schema != avroV1 || byID.Type != sr.TypeAvro {
		t.Fatalf("by id: %+v, %v", byID, err)
	}
	proto, err := cl.CreateSchema(ctx, "proto-value", sr.Schema{Schema: protoV1, Type: sr.TypeProtobuf})
	if err != nil || proto.ID != 2 || proto.Type != sr.TypeProtobuf {
		t.Fatalf("create protobuf: %+v, %v", proto, err)
	}
	found, err := cl.LookupSchema(ctx, "orders-value", v1)
	if err != nil || found.ID != 1 || found.Version != 1 {
		t.Fatalf("lookup: %+v, %v", found, err)
	}

	res, err := cl.CheckCompatibility(ctx, "orders-value", -1, sr.Schema{Schema: avroBreaks})
	if err != nil || res.Is {
		t.Fatalf("compatibility of a breaking change: %+v, %v", res, err)
	}
	_, err = cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: avroBreaks})
	var re *sr.ResponseError
	if !errors.As(err, &re) || re.ErrorCode != 409 {
		t.Fatalf("registering a breaking change: %v, want a 409", err)
	}
	if _, err := cl.CreateSchema(ctx, "orders-value", sr.Schema{Schema: avroV2}); err != nil {
		t.Fatal(err)
	}
	versions, err := cl.SubjectVersions(ctx, "orders-value")
	if err != nil || !slices.Equal(versions, []int{1, 2}) {
		t.Fatalf("versions: %v, %v", versions, err)
	}
	latest, err := cl.SchemaByVersion(ctx, "orders-value", -1)
	if err != nil || latest.Version != 2 || latest.Schema.Schema != avroV2 {
		t.Fatalf("latest: %+v, %v", latest, err)
	}

	if r := cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatFull}, "orders-value"); len(r) != 1 || r[0].Err != nil || r[0].Level != sr.CompatFull {
		t.Fatalf("set compatibility: %+v", r)
	}
	if r := cl.Compatibility(ctx, "orders-value"); len(r) != 1 || r[0].Err != nil || r[0].Level != sr.CompatFull {
		t.Fatalf("compatibility: %+v", r)
	}
	if r := cl.SetMode(ctx, sr.ModeReadOnly, "orders-value"); len(r) != 1 || r[0].Err != nil || r[0].Mode != sr.ModeReadOnly {
		t.Fatalf("set mode: %+v", r)
	}
	if r := cl.ResetMode(ctx, "orders-value"); len(r) != 1 || r[0].Err != nil {
		t.Fatalf("reset mode: %+v", r)
	}

	if err := cl.DeleteSchema(ctx, "orders-value", 1, sr.SoftDelete); err != nil {
		t.Fatal(err)
	}
	if err := cl.DeleteSchema(ctx, "orders-value", 1, sr.HardDelete); err != nil {
		t.Fatal(err)
	}
	deleted, err := cl.DeleteSubject(ctx, "orders-value", sr.SoftDelete)
	if err != nil || !slices.Equal(deleted, []int{2}) {
		t.Fatalf("soft delete: %v, %v", deleted, err)
	}
	if deleted, err = cl.DeleteSubject(ctx, "orders-value", sr.HardDelete); err != nil || !slices.Equal(deleted, []int{2}) {
		t.Fatalf("hard delete: %v, %v", deleted, err)
	}
	subjects, err := cl.Subjects(ctx)
	if err != nil || !slices.Equal(subjects, []string{"proto-value"}) {
		t.Fatalf("subjects: %v, %v", subjects, err)
	}
	if _, err := cl.SchemaByID(ctx, 1); !errors.As(err, &re) || re.ErrorCode != 40403 {
		t.Fatalf("a hard-deleted id: %v, want 40403", err)
	}
}
