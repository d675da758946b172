"""``.proto`` files compiled by protoc (grpcio-tools, the reference compiler) for the
tests: message classes to build records with, and the ``FileDescriptorProto`` the
Confluent registry answers for ``?format=serialized``."""

from __future__ import annotations

import importlib.resources
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_tools import protoc


def compile_files(files: dict[str, str]) -> list[descriptor_pb2.FileDescriptorProto]:
    """The descriptors of ``files`` ({import path: text}) and of what they import,
    dependencies first; AssertionError when protoc refuses them."""
    include = importlib.resources.files("grpc_tools") / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_text(text)
        out = Path(tmp) / "out.pb"
        code = protoc.main(["protoc", f"-I{tmp}", f"-I{include}", "--include_imports",
                            f"--descriptor_set_out={out}", *files])
        assert code == 0, f"protoc refused {list(files)}"
        return list(descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file)


def message_classes(files: dict[str, str]) -> dict[str, Any]:
    """Message classes by full name (nested ones too) of ``files``, in a pool of their
    own."""
    pool = descriptor_pool.DescriptorPool()
    classes: dict[str, Any] = {}
    for file_proto in compile_files(files):
        pool.Add(file_proto)

    def add(desc: Any) -> None:
        classes[desc.full_name] = message_factory.GetMessageClass(desc)
        for nested in desc.nested_types:
            add(nested)

    for name in files:
        for desc in pool.FindFileByName(name).message_types_by_name.values():
            add(desc)
    return classes


MONEY = """syntax = "proto3";
package shop.common;

message Money {
  string currency = 1;
  int64 units = 2;
}
"""

ORDER = """syntax = "proto3";
package shop;

import "common/money.proto";
import "google/protobuf/timestamp.proto";

message Order {
  enum Status {
    STATUS_UNKNOWN = 0;
    PLACED = 1;
    SHIPPED = 2;
  }
  message Line {
    string sku = 1;
    int32 quantity = 2;
    shop.common.Money price = 3;
  }
  string id = 1;
  Status status = 2;
  repeated Line lines = 3;
  map<string, int32> labels = 4;
  shop.common.Money total = 5;
  google.protobuf.Timestamp placed_at = 6;
  bytes signature = 7;
  optional string note = 8;
  uint64 big = 9;
  repeated string tags = 10;
}

message Refund {
  string order_id = 1;
  shop.common.Money amount = 2;
}
"""
