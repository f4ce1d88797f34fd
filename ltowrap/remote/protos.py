"""The REAPI v2, ByteStream and longrunning messages, built from the descriptors in reapi.binpb.

The descriptors go into a private pool: another package's copy of google.rpc or
google.longrunning in the same process cannot clash with ours (dev/gen-reapi-descriptors
says where they come from).
"""

from __future__ import annotations

import os
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def _pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    with open(os.path.join(os.path.dirname(__file__), "reapi.binpb"), "rb") as f:
        for file in descriptor_pb2.FileDescriptorSet.FromString(f.read()).file:
            pool.Add(file)
    return pool


_POOL = _pool()


def _message(name: str) -> Any:  # a message class, made at run time: its fields are unknown to a type checker
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(name))


_V2 = "build.bazel.remote.execution.v2."
Digest = _message(_V2 + "Digest")
Action = _message(_V2 + "Action")
Command = _message(_V2 + "Command")
Platform = _message(_V2 + "Platform")
Directory = _message(_V2 + "Directory")
FileNode = _message(_V2 + "FileNode")
DirectoryNode = _message(_V2 + "DirectoryNode")
ActionResult = _message(_V2 + "ActionResult")
OutputFile = _message(_V2 + "OutputFile")
ExecuteRequest = _message(_V2 + "ExecuteRequest")
ExecuteResponse = _message(_V2 + "ExecuteResponse")
ExecuteOperationMetadata = _message(_V2 + "ExecuteOperationMetadata")
WaitExecutionRequest = _message(_V2 + "WaitExecutionRequest")
GetActionResultRequest = _message(_V2 + "GetActionResultRequest")
UpdateActionResultRequest = _message(_V2 + "UpdateActionResultRequest")
FindMissingBlobsRequest = _message(_V2 + "FindMissingBlobsRequest")
FindMissingBlobsResponse = _message(_V2 + "FindMissingBlobsResponse")
BatchUpdateBlobsRequest = _message(_V2 + "BatchUpdateBlobsRequest")
BatchUpdateBlobsResponse = _message(_V2 + "BatchUpdateBlobsResponse")
BatchReadBlobsRequest = _message(_V2 + "BatchReadBlobsRequest")
BatchReadBlobsResponse = _message(_V2 + "BatchReadBlobsResponse")
GetCapabilitiesRequest = _message(_V2 + "GetCapabilitiesRequest")
ServerCapabilities = _message(_V2 + "ServerCapabilities")
Operation = _message("google.longrunning.Operation")
CancelOperationRequest = _message("google.longrunning.CancelOperationRequest")
Empty = _message("google.protobuf.Empty")
ReadRequest = _message("google.bytestream.ReadRequest")
ReadResponse = _message("google.bytestream.ReadResponse")
WriteRequest = _message("google.bytestream.WriteRequest")
WriteResponse = _message("google.bytestream.WriteResponse")
