// Temporary: the old name of the clock, until the recorders' split files include
// CPerfSupport.h (removed in the same change series).
#include "CPerfSupport.h"
#define CPerfClock_calibrate CPerfSupport_calibrate
#define CPerfClock_tscIsInvariant CPerfSupport_tscIsInvariant
