# `cmake --install BUILD --prefix PREFIX` installs the public headers (include/stoker/), the
# libraries a program or plugin links, a CMake package (find_package(stoker): targets
# stoker::stoker, the whole library, and stoker::headers, what a transform plugin needs) and a
# pkg-config file (stoker.pc). tests/install/ checks both from an out-of-tree project.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Libraries in link order (a library before the ones it uses); internal names stay as they are,
# the package exports them as stoker::<name without the stoker_ prefix>.
set(STOKER_INSTALLED_LIBRARIES
    stoker_data stoker_format stoker_example_proto stoker_io stoker_io_read stoker_io_cache
    stoker_http stoker_s3_protocol stoker_io_base stoker_core)
# The service's client (stoker/service/consumer.h) when the build has the service layer; the
# package then says so (stoker_HAS_SERVICE, the target stoker::service) and needs gRPC.
if(TARGET stoker_service)
  set(STOKER_HAS_SERVICE ON)
  list(PREPEND STOKER_INSTALLED_LIBRARIES stoker_service stoker_service_proto)
  set(STOKER_PC_SERVICE_REQUIRES " grpc++")
else()
  set(STOKER_HAS_SERVICE OFF)
  set(STOKER_PC_SERVICE_REQUIRES "")
endif()
foreach(lib ${STOKER_INSTALLED_LIBRARIES})
  string(REGEX REPLACE "^stoker_" "" export_name ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${export_name})
  target_include_directories(${lib} INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                              $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()

# stoker::headers: the public headers and the header-only parts they use (a plugin links nothing
# else: it resolves stoker's symbols from the program that loads it).
add_library(stoker_headers INTERFACE)
set_target_properties(stoker_headers PROPERTIES EXPORT_NAME headers)
target_include_directories(stoker_headers INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                                    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(stoker_headers INTERFACE absl::status absl::statusor absl::synchronization
                      nlohmann_json::nlohmann_json)
# stoker::stoker: everything a program needs.
add_library(stoker_all INTERFACE)
set_target_properties(stoker_all PROPERTIES EXPORT_NAME stoker)
target_link_libraries(stoker_all INTERFACE stoker_headers ${STOKER_INSTALLED_LIBRARIES})

if(STOKER_HAS_SERVICE)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/stoker DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h")
else()
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/stoker DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h" PATTERN "service" EXCLUDE)
endif()
# The `stoker` command (dispatcher, worker, run, ...).
install(TARGETS stoker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ${STOKER_INSTALLED_LIBRARIES} stoker_headers stoker_all EXPORT stokerTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(STOKER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/stoker)
install(EXPORT stokerTargets NAMESPACE stoker:: DESTINATION ${STOKER_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/stokerConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/stokerConfig.cmake
                              INSTALL_DESTINATION ${STOKER_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/stokerConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/stokerConfig.cmake ${PROJECT_BINARY_DIR}/stokerConfigVersion.cmake
        DESTINATION ${STOKER_CMAKE_DIR})

# pkg-config: stoker's libraries are static, so the libraries they use are in Requires (linked
# as the system has them, usually shared): `pkg-config --cflags --libs stoker`.
set(STOKER_PC_LIBS "")
foreach(lib ${STOKER_INSTALLED_LIBRARIES})
  string(APPEND STOKER_PC_LIBS " -l${lib}")
endforeach()
file(RELATIVE_PATH STOKER_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/stoker.pc.in ${PROJECT_BINARY_DIR}/stoker.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/stoker.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
