# Dispatcher benchmark: 1,000 concurrent /stream callers fed by a simulated
# worker (line latency XADD -> caller, RSS, Redis connections) and enqueue
# latency against librdkafka's mock cluster.  Run a Release build without
# sanitizers:
#   cmake -S . -B build-dispatcher/release -DCMAKE_BUILD_TYPE=Release -DRUNNEL_SANITIZE=OFF -DRUNNEL_FUZZ=OFF
#   cmake --build build-dispatcher/release --target bench_dispatcher runnel-dispatcher
#   build-dispatcher/release/bench/bench_dispatcher [callers] [lines]
add_executable(bench_dispatcher ${CMAKE_CURRENT_LIST_DIR}/bench_dispatcher.c)
target_link_libraries(bench_dispatcher PRIVATE runnel_testsupport PkgConfig::CURL PkgConfig::HIREDIS
                      PkgConfig::JANSSON Threads::Threads)
target_compile_definitions(bench_dispatcher PRIVATE DISPATCHER_BIN="$<TARGET_FILE:runnel-dispatcher>")
add_dependencies(bench_dispatcher runnel-dispatcher)
