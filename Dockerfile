# The Spillway operator image. Build from the repository root:
#   docker build -t spillway:dev .
# The runtime is distroless (glibc, libgcc_s, CA certificates; no shell, no package manager),
# running as the non-root user 65532. The binary needs nothing else: operator/spillway/tests/
# image.rs checks its dynamic dependencies and glibc symbol versions against this image's
# Debian 12 on every test run (docs/operations.md, "The image").

FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin spillway \
    && install -m 0755 target/release/spillway /spillway

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /spillway /usr/local/bin/spillway
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/spillway"]
CMD ["operator"]
