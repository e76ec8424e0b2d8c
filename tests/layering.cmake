# layering.cmake — the layering tests (CMakeLists.txt, "the library"), run by CTest with cmake -P.
#
# MODE=includes: can layer LAYER see the headers it should, and only those? With the include
#   directories of its target (INCLUDES) and every folder of the layers it sees as quote directories
#   (where a quoted include looks first: the including file's own folder), each layer of ALL is
#   probed by preprocessing only:
#   - a layer it sees (SEES): a file including every header of that layer must preprocess — so no
#     header of a visible layer includes anything this layer may not see;
#   - any other layer: __has_include of one of its headers must be false.
#   Only exit statuses are read, never compiler messages.
# MODE=relative: no quoted include in the layers' folders (ALL) climbs out with ".." or is an
#   absolute path — the one way around the include roots that a compiler cannot refuse.
cmake_minimum_required(VERSION 3.25)

string(REPLACE "|" ";" all "${ALL}")

if(MODE STREQUAL "relative")
  set(bad "")
  foreach(layer IN LISTS all)
    file(GLOB_RECURSE files ${SOURCE_DIR}/${layer}/*.h ${SOURCE_DIR}/${layer}/*.cpp ${SOURCE_DIR}/${layer}/*.cu
         ${SOURCE_DIR}/${layer}/*.cuh ${SOURCE_DIR}/${layer}/*.inc)
    foreach(f IN LISTS files)
      file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
      foreach(line IN LISTS lines)
        if(line MATCHES "\"([^\"]*)\"")
          set(path "${CMAKE_MATCH_1}")
          if(path MATCHES "(^|/)\\.\\.(/|$)" OR path MATCHES "^/")
            file(RELATIVE_PATH rel ${SOURCE_DIR} ${f})
            string(APPEND bad "  ${rel}: #include \"${path}\"\n")
          endif()
        endif()
      endforeach()
    endforeach()
  endforeach()
  if(bad)
    message(FATAL_ERROR "layering: quoted includes that escape the layer include roots "
                        "(write \"<layer>/<file>\"):\n${bad}")
  endif()
  message(STATUS "layering: no relative (..) or absolute quoted include in ${ALL}")
  return()
endif()

if(NOT MODE STREQUAL "includes")
  message(FATAL_ERROR "layering.cmake: MODE must be includes or relative, got '${MODE}'")
endif()
string(REPLACE "|" ";" includes "${INCLUDES}")
string(REPLACE "|" ";" sees "${SEES}")
file(MAKE_DIRECTORY ${WORK_DIR})

set(flags -std=c++20 -E)
foreach(layer IN LISTS sees)
  file(GLOB_RECURSE subdirs LIST_DIRECTORIES true ${SOURCE_DIR}/${layer}/*)
  foreach(d ${SOURCE_DIR}/${layer} ${subdirs})
    if(IS_DIRECTORY ${d})
      list(APPEND flags -iquote ${d})
    endif()
  endforeach()
endforeach()
foreach(d IN LISTS includes)
  list(APPEND flags -I${d})
endforeach()

set(failures "")
foreach(layer IN LISTS all)
  file(GLOB_RECURSE headers RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${layer}/*.h)
  list(SORT headers)
  if(NOT headers)
    message(FATAL_ERROR "layering: no headers found in ${SOURCE_DIR}/${layer}")
  endif()
  set(probe ${WORK_DIR}/probe_${layer}.cpp)
  if(layer IN_LIST sees)
    set(text "// ${LAYER} sees ${layer}: every header of ${layer} must preprocess.\n")
    foreach(h IN LISTS headers)
      string(APPEND text "#include \"${h}\"\n")
    endforeach()
    set(expect "visible")
  else()
    list(GET headers 0 h)
    set(text "// ${LAYER} must not see ${layer}.\n#if __has_include(\"${h}\")\n#error \"${h} is visible\"\n#endif\n")
    set(expect "not visible")
  endif()
  file(WRITE ${probe} "${text}")
  execute_process(COMMAND ${CXX} ${flags} ${probe} -o ${WORK_DIR}/probe_${layer}.i RESULT_VARIABLE rc
                  OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    message(STATUS "layering: ${LAYER} -> ${layer}: ${expect}, as required")
  else()
    string(APPEND failures "  ${LAYER} -> ${layer}: expected ${expect}, but preprocessing ${probe} failed "
                           "(rerun: ${CXX} ${flags} ${probe})\n")
  endif()
endforeach()
if(failures)
  string(REPLACE ";" " " failures "${failures}")
  message(FATAL_ERROR "layering: ${LAYER} sees the wrong layers:\n${failures}")
endif()
