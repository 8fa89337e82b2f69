#!/usr/bin/env python3
"""The other side of check_rls_proto's wire test: Python's protobuf (python3-protobuf) with
code that protoc (protobuf-compiler) generates from proto/ at run time into a temporary
directory. `encode FILE` writes a RateLimitRequest's bytes to FILE; `decode FILE` reads
a RateLimitRequest from FILE and prints its fields one per line (a NUL byte as \\0), for the C
test to compare."""
import os
import subprocess
import sys
import tempfile

top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
protos = ["envoy/service/ratelimit/v3/rls.proto",
          "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
          "envoy/config/core/v3/base.proto", "envoy/type/v3/ratelimit_unit.proto",
          # protobuf-c's options (string_as_bytes), which the protos above import
          "protobuf-c/protobuf-c.proto"]


def main():
    mode, path = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as gen:
        subprocess.run(["protoc", "-I" + os.path.join(top, "proto"), "-I/usr/include",
                        "--python_out=" + gen] + protos, check=True)
        sys.path.insert(0, gen)
        from envoy.service.ratelimit.v3 import rls_pb2
        from envoy.type.v3 import ratelimit_unit_pb2
        if mode == "encode":
            r = rls_pb2.RateLimitRequest(domain="edge", hits_addend=3)
            d = r.descriptors.add()
            d.entries.add(key="remote_address", value="10.0.0.1\0tail")
            d.entries.add(key="path", value="/caf\u00e9")
            d.limit.requests_per_unit = 42
            d.limit.unit = ratelimit_unit_pb2.HOUR
            d.hits_addend.value = 7
            d = r.descriptors.add()
            d.entries.add(key="generic_key", value="")
            with open(path, "wb") as f:
                f.write(r.SerializeToString())
        else:
            r = rls_pb2.RateLimitRequest()
            with open(path, "rb") as f:
                r.ParseFromString(f.read())
            print("domain=%s hits_addend=%d" % (r.domain, r.hits_addend))
            for d in r.descriptors:
                print("descriptor has_limit=%s has_hits=%s" % (d.HasField("limit"), d.HasField("hits_addend")))
                if d.HasField("limit"):
                    print("limit=%d unit=%d" % (d.limit.requests_per_unit, d.limit.unit))
                if d.HasField("hits_addend"):
                    print("hits=%d" % d.hits_addend.value)
                for e in d.entries:
                    print("entry %s=%s" % (e.key, e.value.replace("\0", "\\0")))


main()
