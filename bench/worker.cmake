# Worker benchmark: enqueue -> first line latency (one run at a time),
# trivial sandboxed runs per second with 8 slots, one run flooding 1 M lines
# against redis-benchmark's pipelined XADD, idle RSS and RSS per active run.
# Run a Release build without sanitizers:
#   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release -DRUNNEL_SANITIZE=OFF -DRUNNEL_FUZZ=OFF
#   cmake --build build-rel --target bench_worker
#   build-rel/bench/bench_worker [--brokers HOST:PORT | --mock] [--runs 1000] [--latency 200]
#                                [--flood 1000000] [--warm N] [-X kafka.property=value]
# See docs/worker.md ("Measuring").
if(TARGET runnel-worker AND TARGET runnel_devstub)
  add_executable(bench_worker ${CMAKE_CURRENT_LIST_DIR}/bench_worker.c)
  target_link_libraries(bench_worker PRIVATE runnel_testsupport runnel_devstub runnel_worker_stages PkgConfig::HIREDIS
                        PkgConfig::JANSSON PkgConfig::RDKAFKA Threads::Threads)
  target_compile_definitions(bench_worker PRIVATE WORKER_BIN="$<TARGET_FILE:runnel-worker>"
                             BROKER_ADDR_FILE="${CMAKE_BINARY_DIR}/tests/kafka/broker.addr"
                             BROKER_SH="${PROJECT_SOURCE_DIR}/tests/kafka/broker.sh")
  add_dependencies(bench_worker runnel-worker runnel-mock-agent runnel-warm-init)
endif()
