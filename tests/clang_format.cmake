# clang_format.cmake — the test style.clang_format (CMakeLists.txt), run by CTest with cmake -P:
# every C++ and CUDA source that git tracks is as clang-format 14 writes it with the tree's
# .clang-format. Another clang-format version formats some constructs differently, so the test
# prints "SKIPPED" (CTest's SKIP_REGULAR_EXPRESSION reads it) where clang-format 14 is missing, as
# it does outside a git checkout.
cmake_minimum_required(VERSION 3.25)

find_program(CLANG_FORMAT NAMES clang-format-14 clang-format)
find_program(GIT git)
if(NOT CLANG_FORMAT OR NOT GIT OR NOT EXISTS ${SOURCE_DIR}/.git)
  message("style.clang_format: SKIPPED (needs git and clang-format 14)")
  return()
endif()
execute_process(COMMAND ${CLANG_FORMAT} --version OUTPUT_VARIABLE version)
if(NOT version MATCHES "version 14\\.")
  message("style.clang_format: SKIPPED (${CLANG_FORMAT} is not version 14: ${version})")
  return()
endif()
execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} ls-files -- *.h *.cpp *.cu *.cuh
                OUTPUT_VARIABLE files OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message("style.clang_format: SKIPPED (git ls-files failed)")
  return()
endif()
string(REPLACE "\n" ";" files "${files}")
set(bad "")
foreach(f IN LISTS files)
  execute_process(COMMAND ${CLANG_FORMAT} --dry-run --Werror ${f} WORKING_DIRECTORY ${SOURCE_DIR}
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    string(APPEND bad "  ${f}\n")
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "not as clang-format 14 writes them (run clang-format -i on each):\n${bad}")
endif()
list(LENGTH files n)
message("style.clang_format: ${n} files formatted")
