/* tools/lib/backend_load.c: backend_cuda() (kernels/backend.h).  In a CUDA
 * build the backend and the CUDA libraries it needs (cudart, cuBLAS,
 * cuDNN) are one shared object beside the tools, opened only when a tool
 * asks for the GPU: a CPU run maps none of them, and a tool runs where
 * they are absent. */
#include "backend.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "util.h"

/* Defined when the backend is linked in (the unit and GPU tests). */
extern const struct backend *backend_cuda_open(char *err, size_t errsz) __attribute__((weak));

const struct backend *backend_cuda(char *err, size_t errsz)
{
#ifdef POROS_HAVE_CUDA
	static const struct backend *(*open_fn)(char *, size_t);
	char *dir, *path;
	void *h;

	if (backend_cuda_open != NULL)
		return backend_cuda_open(err, errsz);
	if (open_fn == NULL) {
		dir = poros_exe_dir();
		path = xasprintf("%s/" BACKEND_CUDA_SO, dir != NULL ? dir : ".");
		free(dir);
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (h == NULL) {
			if (err != NULL && errsz > 0)
				snprintf(err, errsz, "the CUDA backend did not load: %s", dlerror());
			free(path);
			return NULL;
		}
		*(void **)&open_fn = dlsym(h, "backend_cuda_open");
		if (open_fn == NULL) {
			if (err != NULL && errsz > 0)
				snprintf(err, errsz, "%s: no backend_cuda_open in it", path);
			free(path);
			return NULL;
		}
		free(path);
	}
	return open_fn(err, errsz);
#else
	if (backend_cuda_open != NULL)
		return backend_cuda_open(err, errsz);
	if (err != NULL && errsz > 0)
		snprintf(err, errsz, "built without CUDA");
	return NULL;
#endif
}
