import PerfHarnessCLI
import Scenarios

PerfHarnessCLI.main(scenarios: PhotoSearchScenarios.all)
