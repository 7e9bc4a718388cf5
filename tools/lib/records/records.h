/* tools/lib/records/records.h: the records the tools exchange, the public
 * face of tools/lib/records/: the cell (cell.h) and its content hash
 * (cell_hash.h), the artifact and the trainer summary (artifact.h), the
 * parity row (parity.h), the one timing method (timing.h), which artifacts
 * are current (current.h) and what the reports read (report.h).
 * cell_int.h and artifact_int.h are private to the folder. */
#ifndef POROS_RECORDS_H
#define POROS_RECORDS_H

#include "cell.h"
#include "cell_hash.h"
#include "artifact.h"
#include "parity.h"
#include "timing.h"
#include "current.h"
#include "report.h"

#endif
