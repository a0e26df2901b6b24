# The container image's unity build (deploy/Containerfile, docs/deploy.md): cmake -DCMAKE_UNITY_BUILD=ON
# -DCMAKE_PROJECT_INCLUDE=deploy/unity-build.cmake. A unity build compiles a target's sources 8 to
# a translation unit, so two sources of one target that define the same internal name (in an
# anonymous namespace, or `static`) collide there. The sources below do; each is compiled on its
# own (SKIP_UNITY_BUILD_INCLUSION), the rest of its target still in unity files. Nothing else in
# the build changes: the host's `make build` is not a unity build.
#
# A change that adds such a collision fails the image's full build with "redefinition of ..." (or
# a name that "does not name a type"); add the file named in the error here. A listed file that no
# target compiles any more is an error, so the list does not outlive its reasons.
set(STOKER_UNITY_OWN_UNIT
  src/stoker/cli/demo_command.cc            # Seconds(), as another command of the CLI
  src/stoker/data/op_registry.cc            # Registry, a type of that name elsewhere in stoker_data
  src/stoker/io/s3/sigv4.cc                 # Lower(), as credentials.cc
  src/stoker/service/client/client_fetch.cc # kMaxSequence, as the client's other sources
)

function(stoker_unity_targets dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    stoker_unity_targets(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(stoker_unity_own_units)
  stoker_unity_targets(${CMAKE_SOURCE_DIR} targets)
  set(found "")
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "INTERFACE_LIBRARY" OR type STREQUAL "UTILITY")
      continue()
    endif()
    get_target_property(sources ${target} SOURCES)
    get_target_property(target_dir ${target} SOURCE_DIR)
    foreach(source ${sources})
      get_filename_component(path ${source} ABSOLUTE BASE_DIR ${target_dir})
      file(RELATIVE_PATH relative ${CMAKE_SOURCE_DIR} ${path})
      if(relative IN_LIST STOKER_UNITY_OWN_UNIT)
        set_source_files_properties(${path} TARGET_DIRECTORY ${target}
                                    PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
        list(APPEND found ${relative})
      endif()
    endforeach()
  endforeach()
  foreach(file ${STOKER_UNITY_OWN_UNIT})
    if(NOT file IN_LIST found)
      message(FATAL_ERROR "deploy/unity-build.cmake: no target compiles ${file}; remove it from "
                          "STOKER_UNITY_OWN_UNIT")
    endif()
  endforeach()
  list(JOIN STOKER_UNITY_OWN_UNIT ", " listed)
  message(STATUS "unity build; compiled on their own: ${listed}")
endfunction()

# At the end of the top-level CMakeLists.txt, when every target exists.
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL stoker_unity_own_units)
