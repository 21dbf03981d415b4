"""confluent-kafka-python against strata's schema registry and broker.

Usage: registry_check.py BOOTSTRAP REGISTRY_URL TOPIC_PREFIX [USER PASSWORD]

With USER and PASSWORD (a strata user), the registry is reached with
basic auth and the broker with SASL SCRAM-SHA-512, and a client without
the password is checked to be refused.

Drives SchemaRegistryClient (register, get by id, lookup, versions,
compatibility levels and checks), then for Avro, Protobuf and JSON Schema
produces records through confluent_kafka.Producer with the type's
serializer and consumes them back with its deserializer. Every check is an
assert naming what differed; the last line printed is a JSON report of
what was checked, for the Go test.
"""

import json
import sys

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

bootstrap, url, prefix = sys.argv[1:4]
auth = sys.argv[4:6]
conf = {"url": url}
if auth:
    conf["basic.auth.user.info"] = f"{auth[0]}:{auth[1]}"
client = SchemaRegistryClient(conf)
report = {"client": [], "serdes": {}}
kafka = {"bootstrap.servers": bootstrap}
if auth:
    kafka.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                  "sasl.username": auth[0], "sasl.password": auth[1]})


def check(name, got, want):
    assert got == want, f"{name}: got {got!r}, want {want!r}"
    report["client"].append(name)


# --- SchemaRegistryClient -------------------------------------------------
if auth:
    for name, other in [("no basic auth", {"url": url}),
                        ("a wrong password", {"url": url, "basic.auth.user.info": f"{auth[0]}:not-{auth[1]}"})]:
        try:
            SchemaRegistryClient(other).get_subjects()
            raise AssertionError(f"a client with {name} was answered")
        except SchemaRegistryError as e:
            assert e.http_status_code == 401, f"{name}: HTTP {e.http_status_code}, want 401"
            report["client"].append(f"{name} is refused with 401")

subject = f"{prefix}-client-value"
v1 = '{"type":"record","name":"Click","fields":[{"name":"url","type":"string"}]}'
v2 = ('{"type":"record","name":"Click","fields":[{"name":"url","type":"string"},'
      '{"name":"n","type":"long","default":0}]}')
bad = '{"type":"record","name":"Click","fields":[{"name":"url","type":"long"}]}'

id1 = client.register_schema(subject, Schema(v1, "AVRO"))
check("register answers the same id again", client.register_schema(subject, Schema(v1, "AVRO")), id1)
check("get_schema by id", json.loads(client.get_schema(id1).schema_str), json.loads(v1))
found = client.lookup_schema(subject, Schema(v1, "AVRO"))
check("lookup_schema finds the version", (found.schema_id, found.subject, found.version), (id1, subject, 1))
check("test_compatibility of a compatible schema", client.test_compatibility(subject, Schema(v2, "AVRO")), True)
check("test_compatibility of an incompatible one", client.test_compatibility(subject, Schema(bad, "AVRO")), False)
try:
    client.register_schema(subject, Schema(bad, "AVRO"))
    raise AssertionError("an incompatible schema was registered")
except SchemaRegistryError as e:
    check("an incompatible registration is refused with 409", e.http_status_code, 409)
id2 = client.register_schema(subject, Schema(v2, "AVRO"))
assert id2 != id1, f"the second version got id {id2}, the first's"
latest = client.get_latest_version(subject)
check("get_latest_version", (latest.schema_id, latest.version), (id2, 2))
check("get_version", client.get_version(subject, 1).schema_id, id1)
check("get_versions", client.get_versions(subject), [1, 2])
assert subject in client.get_subjects(), f"{subject} not in get_subjects"
check("set_compatibility", client.set_compatibility(subject, "FULL_TRANSITIVE"), {"compatibility": "FULL_TRANSITIVE"})
check("get_compatibility", client.get_compatibility(subject), "FULL_TRANSITIVE")
check("test_compatibility under FULL_TRANSITIVE", client.test_compatibility(subject, Schema(bad, "AVRO")), False)
check("get_subjects_by_schema_id names the subject", subject in client.get_subjects_by_schema_id(id2), True)
try:
    client.get_schema(99999)
    raise AssertionError("schema 99999 was found")
except SchemaRegistryError as e:
    check("an unknown id is 40403", e.error_code, 40403)


# --- serializers through a strata broker ------------------------------------
def roundtrip(kind, topic, serializer, deserializer, values, eq=lambda a, b: a == b):
    """Produces values serialized, consumes them back deserialized."""
    producer = Producer({**kafka, "acks": "all"})
    errors = []
    for i, value in enumerate(values):
        payload = serializer(value, SerializationContext(topic, MessageField.VALUE))
        assert payload[0] == 0, f"{kind}: the serializer's payload starts with {payload[0]}, not the magic byte 0"
        producer.produce(topic, key=str(i).encode(), value=payload,
                         on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0, f"{kind}: records still unsent after 30s"
    assert not errors, f"{kind}: produce failed: {errors}"

    consumer = Consumer({**kafka, "group.id": f"{topic}-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = []
    try:
        for _ in range(300):
            if len(got) == len(values):
                break
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert not msg.error(), f"{kind}: consume: {msg.error()}"
            got.append(deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        consumer.close()
    assert len(got) == len(values), f"{kind}: consumed {len(got)} of {len(values)} records"
    for i, (g, w) in enumerate(zip(got, values)):
        assert eq(g, w), f"{kind}: record {i} decoded as {g!r}, produced {w!r}"
    schema_id = int.from_bytes(serializer(values[0], SerializationContext(topic, MessageField.VALUE))[1:5], "big")
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.schema_id == schema_id, f"{kind}: the records name id {schema_id}, {topic}-value's latest is {registered.schema_id}"
    report["serdes"][kind] = {"records": len(got), "schema_id": schema_id, "schema_type": registered.schema.schema_type}


avro_schema = json.dumps({"type": "record", "name": "Order", "namespace": "strata.check", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"},
    {"name": "price", "type": "double"}, {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "note", "type": ["null", "string"], "default": None}]})
avro_values = [{"id": i, "item": f"item-{i}", "price": i * 1.25, "tags": ["a", str(i)], "note": None if i % 2 else f"n{i}"}
               for i in range(10)]
roundtrip("AVRO", f"{prefix}-avro", AvroSerializer(client, avro_schema), AvroDeserializer(client), avro_values)

# A Protobuf message class made at run time from a descriptor (no protoc).
fdp = descriptor_pb2.FileDescriptorProto(name="strata_check_order.proto", package="strata.check", syntax="proto3")
msg = fdp.message_type.add(name="Order")
F = descriptor_pb2.FieldDescriptorProto
for number, (name, typ, label) in enumerate([("id", F.TYPE_INT64, F.LABEL_OPTIONAL), ("item", F.TYPE_STRING, F.LABEL_OPTIONAL),
                                             ("price", F.TYPE_DOUBLE, F.LABEL_OPTIONAL), ("tags", F.TYPE_STRING, F.LABEL_REPEATED)], 1):
    msg.field.add(name=name, number=number, type=typ, label=label)
pool = descriptor_pool.DescriptorPool()
pool.Add(fdp)
Order = message_factory.GetMessageClass(pool.FindMessageTypeByName("strata.check.Order"))
proto_values = [Order(id=i, item=f"item-{i}", price=i * 1.25, tags=["a", str(i)]) for i in range(10)]
roundtrip("PROTOBUF", f"{prefix}-proto", ProtobufSerializer(Order, client), ProtobufDeserializer(Order), proto_values)

json_schema = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
                          "properties": {"id": {"type": "integer"}, "item": {"type": "string"},
                                         "price": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}}},
                          "required": ["id", "item"]})
json_values = [{"id": i, "item": f"item-{i}", "price": i * 1.25, "tags": ["a", str(i)]} for i in range(10)]
roundtrip("JSON", f"{prefix}-json", JSONSerializer(json_schema, client), JSONDeserializer(json_schema, schema_registry_client=client),
          json_values)

print(json.dumps(report))
