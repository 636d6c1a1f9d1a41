import com.google.gson.GsonBuilder;
import edu.uoregon.tau.common.MetaDataMap;
import edu.uoregon.tau.perfdmf.DBDataSource;
import edu.uoregon.tau.perfdmf.DataSource;
import edu.uoregon.tau.perfdmf.DataSourceExport;
import edu.uoregon.tau.perfdmf.DatabaseAPI;
import edu.uoregon.tau.perfdmf.Function;
import edu.uoregon.tau.perfdmf.FunctionProfile;
import edu.uoregon.tau.perfdmf.Metric;
import edu.uoregon.tau.perfdmf.PackedProfileDataSource;
import edu.uoregon.tau.perfdmf.Thread;
import edu.uoregon.tau.perfdmf.UserEvent;
import edu.uoregon.tau.perfdmf.UserEventProfile;
import edu.uoregon.tau.perfdmf.taudb.TAUdbDatabaseAPI;
import java.io.BufferedReader;
import java.io.File;
import java.io.FileWriter;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.Writer;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Opens one TAUdb trial the way ParaProf does (PerfDMF's TrialGrabber: DatabaseAPI, wrapped in
 * TAUdbDatabaseAPI for schema version > 0, setTrial, DBDataSource.load()), or a packed profile
 * file as ParaProf opens one (PackedProfileDataSource), and writes what the reader made of it
 * as JSON; optionally also TAU's packed export of it (writePacked).
 *
 * Usage: javac -cp JARS -d BUILD TauReadTrial.java, then
 * java -cp JARS:BUILD TauReadTrial CONFIG TRIAL_ID OUT_JSON [OUT_PPK] (CONFIG: PerfDMF's
 * key:value configuration file; JARS: TAU's jars in ../shared/peer-data/tau/tau-java), or
 * java -cp JARS:BUILD TauReadTrial FILE.ppk - OUT_JSON. Without arguments it serves such
 * requests one after the other in the same JVM: one line of tab-separated arguments each on
 * standard input, answered "ok" or "error<TAB>message" on standard output (the trace on
 * standard error), until the end of its input.
 *
 * JSON: metrics (names in order); threads ([node, context, thread]); functions (name -> group
 * string); values ("mean" and "total", TAU's own, and one entry per thread "n,c,t": function ->
 * {calls, subroutines, inclusive: [per metric], exclusive: [per metric]}); user_events
 * ("n,c,t" -> event -> [count, max, min, mean, sum_squares]); trial_metadata (primary) and
 * trial_uncommon_metadata (secondary), name -> value; thread_metadata ("n,c,t" -> name ->
 * value; TAU's reader leaves it empty).
 */
public class TauReadTrial {
    public static void main(String[] args) throws Exception {
        if (args.length > 0) {
            read(args);
            System.exit(0);
        }
        // the answers have standard output to themselves: what TAU's library prints goes to
        // standard error
        PrintStream answers = new PrintStream(System.out, true, "UTF-8");
        System.setOut(System.err);
        BufferedReader requests = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        for (String line = requests.readLine(); line != null; line = requests.readLine()) {
            try {
                read(line.split("\t"));
                answers.println("ok");
            } catch (Throwable e) {
                e.printStackTrace();
                answers.println("error\t" + String.valueOf(e).replace('\n', ' '));
            }
        }
        System.exit(0);
    }

    private static void read(String[] args) throws Exception {
        DatabaseAPI[] opened = new DatabaseAPI[1];
        try {
            readInto(args, opened);
        } finally {
            if (opened[0] != null) {
                opened[0].terminate();  // its connection, whether the read went through or not
            }
        }
    }

    /** Reads and writes as the usage says; the database API it opens is put in opened[0]. */
    private static void readInto(String[] args, DatabaseAPI[] opened) throws Exception {
        DatabaseAPI api;
        DataSource source;
        MetaDataMap trialMetadata;
        MetaDataMap uncommonMetadata;
        if (args[0].endsWith(".ppk")) {
            source = new PackedProfileDataSource(new File(args[0]));
            source.load();
            trialMetadata = source.getMetaData();
            uncommonMetadata = source.getUncommonMetaData();
        } else {
            api = new DatabaseAPI();
            opened[0] = api;
            api.initialize(args[0], false);
            if (api.db().getSchemaVersion() > 0) {
                api = new TAUdbDatabaseAPI(api);
                opened[0] = api;
            }
            api.setTrial(Integer.parseInt(args[1]), true);
            source = new DBDataSource(api);
            source.load();
            trialMetadata = api.getTrial().getMetaData();
            uncommonMetadata = api.getTrial().getUncommonMetaData();
        }

        Map<String, Object> out = new LinkedHashMap<>();
        List<String> metrics = new ArrayList<>();
        for (Metric metric : source.getMetrics()) {
            metrics.add(metric.getName());
        }
        out.put("metrics", metrics);
        List<int[]> threads = new ArrayList<>();
        for (Thread thread : source.getThreads()) {
            threads.add(new int[] {thread.getNodeID(), thread.getContextID(), thread.getThreadID()});
        }
        out.put("threads", threads);
        Map<String, String> functions = new TreeMap<>();
        for (Function function : source.getFunctions()) {
            functions.put(function.getName(), function.getGroupString());
        }
        out.put("functions", functions);

        Map<String, Object> values = new LinkedHashMap<>();
        values.put("mean", profiles(source, source.getMeanData()));
        values.put("total", profiles(source, source.getTotalData()));
        Map<String, Object> events = new LinkedHashMap<>();
        Map<String, Object> threadMetadata = new LinkedHashMap<>();
        for (Thread thread : source.getThreads()) {
            String key = thread.getNodeID() + "," + thread.getContextID() + "," + thread.getThreadID();
            values.put(key, profiles(source, thread));
            Map<String, double[]> perEvent = new TreeMap<>();
            for (UserEvent event : source.getUserEvents()) {
                UserEventProfile p = thread.getUserEventProfile(event);
                if (p != null) {
                    perEvent.put(event.getName(), new double[] {p.getNumSamples(), p.getMaxValue(),
                        p.getMinValue(), p.getMeanValue(), p.getSumSquared()});
                }
            }
            events.put(key, perEvent);
            threadMetadata.put(key, strings(thread.getMetaData()));
        }
        out.put("values", values);
        out.put("user_events", events);
        out.put("trial_metadata", strings(trialMetadata));
        out.put("trial_uncommon_metadata", strings(uncommonMetadata));
        out.put("thread_metadata", threadMetadata);

        try (Writer writer = new FileWriter(args[2])) {
            new GsonBuilder().serializeSpecialFloatingPointValues().create().toJson(out, writer);
        }
        if (args.length > 3) {
            DataSourceExport.writePacked(source, new File(args[3]));
        }
    }

    private static Map<String, Object> profiles(DataSource source, Thread thread) {
        int n = source.getNumberOfMetrics();
        Map<String, Object> byFunction = new TreeMap<>();
        for (Function function : source.getFunctions()) {
            FunctionProfile p = thread.getFunctionProfile(function);
            if (p == null) {
                continue;
            }
            double[] inclusive = new double[n];
            double[] exclusive = new double[n];
            for (int m = 0; m < n; m++) {
                inclusive[m] = p.getInclusive(m);
                exclusive[m] = p.getExclusive(m);
            }
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("calls", p.getNumCalls());
            row.put("subroutines", p.getNumSubr());
            row.put("inclusive", inclusive);
            row.put("exclusive", exclusive);
            byFunction.put(function.getName(), row);
        }
        return byFunction;
    }

    private static Map<String, String> strings(MetaDataMap map) {
        Map<String, String> out = new TreeMap<>();
        if (map != null) {
            for (Map.Entry<MetaDataMap.MetaDataKey, MetaDataMap.MetaDataValue> e : map.entrySet()) {
                out.put(e.getKey().name, String.valueOf(e.getValue().value));
            }
        }
        return out;
    }
}
