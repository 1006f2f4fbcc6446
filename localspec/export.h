/* The functions ctypes calls in localspec's C extensions: exported from the DLL on Windows (setuptools exports
 * only PyInit there), visible elsewhere. */
#ifndef LOCALSPEC_EXPORT_H
#define LOCALSPEC_EXPORT_H
#ifdef _WIN32
#define API __declspec(dllexport)
#else
#define API __attribute__((visibility("default")))
#endif
#endif
