"""Produces records through confluent-kafka-python's Avro, Protobuf and
JSON Schema serializers (schemas registered in strata's registry) to
topics created with strata.value.schema=schema_id, for the typed columns'
test (interop/typed_test.go).

Usage: typed_produce.py BOOTSTRAP REGISTRY_URL FROM TO VERSION

Produces records FROM..TO-1 of every topic (FROM 0: the topics are made
first). Record i has id i, item "item-{i % 7}", price i * 1.25 and tags
["a", str(i)]; the Avro topic's record 13 is not Avro. VERSION 2's schemas
add a field, discount (i * 0.5), as a compatible new version of each
subject. Each topic is produced in batches of 25, flushed, so its segments
roll between them. The last line printed is a JSON report: the topics and
the records produced.
"""

import json
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

bootstrap, url = sys.argv[1], sys.argv[2]
first, end, version = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
client = SchemaRegistryClient({"url": url})
kafka = {"bootstrap.servers": bootstrap}

topics = {"typed-avro": "AVRO", "typed-proto": "PROTOBUF", "typed-json": "JSON"}
if first == 0:
    admin = AdminClient(kafka)
    for topic, future in admin.create_topics([NewTopic(t, 1, 1, config={"strata.value.schema": "schema_id"}) for t in topics]).items():
        future.result()

v2 = version == 2
avro_fields = [{"name": "id", "type": "long"}, {"name": "item", "type": "string"},
               {"name": "price", "type": "double"}, {"name": "tags", "type": {"type": "array", "items": "string"}}]
if v2:
    avro_fields.append({"name": "discount", "type": ["null", "double"], "default": None})
avro_schema = json.dumps({"type": "record", "name": "Order", "namespace": "strata.check", "fields": avro_fields})

fdp = descriptor_pb2.FileDescriptorProto(name="strata_typed_order.proto", package="strata.check", syntax="proto3")
msg = fdp.message_type.add(name="Order")
F = descriptor_pb2.FieldDescriptorProto
for number, (name, typ, label) in enumerate([("id", F.TYPE_INT64, F.LABEL_OPTIONAL), ("item", F.TYPE_STRING, F.LABEL_OPTIONAL),
                                             ("price", F.TYPE_DOUBLE, F.LABEL_OPTIONAL), ("tags", F.TYPE_STRING, F.LABEL_REPEATED),
                                             ("discount", F.TYPE_DOUBLE, F.LABEL_OPTIONAL)][:5 if v2 else 4], 1):
    msg.field.add(name=name, number=number, type=typ, label=label)
pool = descriptor_pool.DescriptorPool()
pool.Add(fdp)
Order = message_factory.GetMessageClass(pool.FindMessageTypeByName("strata.check.Order"))

json_properties = {"id": {"type": "integer"}, "item": {"type": "string"},
                   "price": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}}}
if v2:
    json_properties["discount"] = {"type": "number"}
# A closed content model: a property added later is a compatible change.
json_schema = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
                          "properties": json_properties, "required": ["id", "item", "price", "tags"],
                          "additionalProperties": False})


def order(i):
    o = {"id": i, "item": f"item-{i % 7}", "price": i * 1.25, "tags": ["a", str(i)]}
    if v2:
        o["discount"] = i * 0.5
    return o


serializers = {
    "typed-avro": (AvroSerializer(client, avro_schema), order),
    "typed-proto": (ProtobufSerializer(Order, client), lambda i: Order(**order(i))),
    "typed-json": (JSONSerializer(json_schema, client), order),
}
producer = Producer({**kafka, "acks": "all"})
errors = []
for topic, (serialize, make) in serializers.items():
    for i in range(first, end):
        value = serialize(make(i), SerializationContext(topic, MessageField.VALUE))
        if topic == "typed-avro" and i == 13:
            value = b"not avro"
        producer.produce(topic, value=value, on_delivery=lambda err, m: err and errors.append(err))
        if i % 25 == 24:
            assert producer.flush(30) == 0, f"{topic}: records still unsent after 30s"
assert producer.flush(30) == 0 and not errors, f"produce failed: {errors}"
print(json.dumps({"topics": topics, "records": end - first}))
