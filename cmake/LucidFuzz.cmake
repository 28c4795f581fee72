# The libFuzzer targets' shared build rules (src/formats/fuzz, src/tokenizer/fuzz, tests/fuzz).
#
# The project compiles with g++; libFuzzer needs clang, so each fuzzer's sources are compiled by
# calling clang++ directly with -fsanitize=fuzzer-no-link,address,undefined and linked with
# -fsanitize=fuzzer. When no clang++ with libFuzzer's runtime (libclang-rt-dev) is found, or tests
# are off, the fuzzers are skipped with one status line. ctest runs each fuzzer for a bounded time
# (20 s or 100k inputs) against its committed seeds in <dir>/seeds/<name>.
#
#   lucid_fuzz_available(<var> <what>)
#       Sets <var> to TRUE when fuzzers can be built; otherwise FALSE and prints why, naming <what>.
#   lucid_fuzz_target(NAME <name> SOURCES <fuzz.cpp> <library sources...>
#                     [CFLAGS <flags...>] [LDFLAGS <flags...>] [ENV <VAR=value...>])
#       Builds build/.../lucid_<name> and registers the ctest test <name> (label "fuzz"). Sources
#       are absolute paths; their objects are shared between the targets of one directory, so the
#       targets of one directory must pass the same CFLAGS.
include_guard(GLOBAL)

find_program(LUCID_FUZZ_CLANGXX NAMES clang++-14 clang++)

function(lucid_fuzz_available out what)
  set(${out} FALSE PARENT_SCOPE)
  if(NOT LUCID_BUILD_TESTS)
    return()
  endif()
  if(NOT LUCID_FUZZ_CLANGXX)
    message(STATUS "${what}: no clang++ found, skipped")
    return()
  endif()
  get_property(probed GLOBAL PROPERTY LUCID_FUZZ_PROBE_RC SET)
  if(NOT probed)
    set(probe_dir ${PROJECT_BINARY_DIR}/fuzz_probe)
    file(WRITE ${probe_dir}/probe.cpp
         "#include <cstdint>\n#include <cstddef>\n"
         "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
    execute_process(COMMAND ${LUCID_FUZZ_CLANGXX} -fsanitize=fuzzer ${probe_dir}/probe.cpp
                            -o ${probe_dir}/probe
                    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    set_property(GLOBAL PROPERTY LUCID_FUZZ_PROBE_RC "${rc}")
  endif()
  get_property(rc GLOBAL PROPERTY LUCID_FUZZ_PROBE_RC)
  if(NOT rc EQUAL 0)
    message(STATUS "${what}: ${LUCID_FUZZ_CLANGXX} has no libFuzzer (libclang-rt-dev), skipped")
    return()
  endif()
  set(${out} TRUE PARENT_SCOPE)
endfunction()

function(lucid_fuzz_target)
  cmake_parse_arguments(F "" "NAME" "SOURCES;CFLAGS;LDFLAGS;ENV" ${ARGN})
  set(flags -std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined
            -fno-sanitize-recover=undefined -I${PROJECT_SOURCE_DIR}/src ${F_CFLAGS})
  file(RELATIVE_PATH dir_rel ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  string(MAKE_C_IDENTIFIER "${dir_rel}" dir_id)
  set(objs "")
  set(obj_targets "")
  foreach(src ${F_SOURCES})
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${src})
    string(MAKE_C_IDENTIFIER "${rel}" id)
    set(obj ${CMAKE_CURRENT_BINARY_DIR}/obj/${id}.o)
    set(obj_target fuzzobj_${dir_id}_${id})
    if(NOT TARGET ${obj_target})
      add_custom_command(OUTPUT ${obj}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/obj
        COMMAND ${LUCID_FUZZ_CLANGXX} ${flags} -c ${src} -o ${obj}
        DEPENDS ${src} IMPLICIT_DEPENDS CXX ${src} COMMENT "clang fuzz build ${rel}" VERBATIM)
      add_custom_target(${obj_target} DEPENDS ${obj})
    endif()
    list(APPEND objs ${obj})
    list(APPEND obj_targets ${obj_target})
  endforeach()
  set(bin ${CMAKE_CURRENT_BINARY_DIR}/lucid_${F_NAME})
  add_custom_command(OUTPUT ${bin}
    COMMAND ${LUCID_FUZZ_CLANGXX} ${flags} -fsanitize=fuzzer ${objs} -o ${bin} ${F_LDFLAGS}
    DEPENDS ${objs} COMMENT "clang fuzz link ${F_NAME}" VERBATIM)
  add_custom_target(lucid_${F_NAME} ALL DEPENDS ${bin})
  add_dependencies(lucid_${F_NAME} ${obj_targets})
  set(corpus ${CMAKE_CURRENT_BINARY_DIR}/${F_NAME}_corpus)
  file(MAKE_DIRECTORY ${corpus})
  # Bounded: at most 20 s or 100k inputs, so the whole suite stays fast on 2 cores.
  add_test(NAME ${F_NAME}
    COMMAND ${CMAKE_COMMAND} -E env ${F_ENV} ASAN_OPTIONS=detect_leaks=0 ${bin}
            -max_total_time=20 -runs=100000 -rss_limit_mb=2048 -timeout=10 ${corpus}
            ${CMAKE_CURRENT_SOURCE_DIR}/seeds/${F_NAME})
  set_tests_properties(${F_NAME} PROPERTIES TIMEOUT 120 LABELS fuzz)
endfunction()
