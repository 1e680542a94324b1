;;; forj-epc-test.el --- Tests of the worker connection and lifecycle  -*- lexical-binding: t; -*-

;;; Commentary:

;; ERT tests of forj-epc.el and forj-worker.el against the real Python
;; worker, on temporary projects.  The worker's Python comes from
;; $FORJ_PYTHON (the Makefile sets it to the project's .venv) or from
;; `forj-worker-python'.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'forj-epc)
(require 'forj-worker)

(defvar forj-test--python (or (getenv "FORJ_PYTHON") forj-worker-python)
  "The Python the tests run the worker with.")

(defmacro forj-test-with-project (tree &rest body)
  "Run BODY with `root' bound to a temporary project built from TREE.
TREE is an alist of (RELATIVE-PATH . CONTENT); a nil CONTENT makes a
directory.  The worker's config and state go to temporary places too,
and every worker started for the project is stopped afterwards."
  (declare (indent 1) (debug t))
  `(let* ((root (file-name-as-directory (make-temp-file "forj-test-" t)))
          (home (make-temp-file "forj-home-" t))
          (process-environment
           (append (list (concat "FORJ_CONFIG=" (expand-file-name "config.toml" home))
                         (concat "FORJ_STATE_DIR=" (expand-file-name "state" home)))
                   process-environment))
          (forj-worker-python forj-test--python))
     (unwind-protect
         (progn
           (dolist (entry ,tree)
             (let ((path (expand-file-name (car entry) root)))
               (if (null (cdr entry))
                   (make-directory path t)
                 (make-directory (file-name-directory path) t)
                 (with-temp-file path (insert (cdr entry))))))
           ,@body)
       (forj-worker-stop root)
       (delete-directory root t)
       (delete-directory home t))))

(defun forj-test--wait-for (predicate &optional timeout)
  "Process events until PREDICATE is non-nil or TIMEOUT seconds (10) pass."
  (let ((deadline (+ (float-time) (or timeout 10))))
    (while (and (not (funcall predicate)) (< (float-time) deadline))
      (accept-process-output nil 0.02))
    (funcall predicate)))

(defun forj-test--worker (root)
  "Start (or find) the worker for ROOT and wait until it is ready."
  (let (worker failure)
    (forj-worker-ensure root (lambda (w) (setq worker w)) (lambda (e) (setq failure e)))
    (forj-test--wait-for (lambda () (or worker failure)) 30)
    (should-not failure)
    (should worker)
    worker))

(defun forj-test--call (worker method body)
  "Call METHOD with BODY on WORKER and wait for the reply."
  (forj-epc-call-sync (forj-worker-connection worker) method body :timeout 30))

(ert-deftest forj-test-epc-hello-ping-and-tools ()
  "The worker starts, says hello with its tools, and answers ping."
  (forj-test-with-project '(("README.md" . "# demo\n"))
    (let* ((worker (forj-test--worker root))
           (hello (forj-worker-hello worker))
           (names (mapcar (lambda (tool) (plist-get tool :name)) (plist-get hello :tools))))
      (should (equal (plist-get hello :protocol) 1))
      (should (equal (file-name-as-directory (plist-get hello :root))
                     (file-name-as-directory (file-truename root))))
      (should (member "read_file" names))
      (should (equal names (sort (copy-sequence names) #'string<)))
      (should (null (forj-test--call worker "ping" nil))))))

(ert-deftest forj-test-tools-read-file-basic ()
  "A read_file call planned and executed through the connection."
  (forj-test-with-project '(("src/a.el" . "(message \"hi\")\n"))
    (let* ((worker (forj-test--worker root))
           (events nil)
           (conn (forj-worker-connection worker)))
      (setf (forj-epc-connection-on-event conn) (lambda (e) (push e events)))
      (let* ((plan (forj-test--call worker "plan"
                                    (list :calls (vector (list :id "1" :name "read_file"
                                                               :args (list :path "src/a.el"))))))
             (item (aref (plist-get plan :items) 0))
             (done (forj-test--call worker "execute" (list :batch_id (plist-get plan :batch_id))))
             (result (aref (plist-get done :results) 0)))
        (should (equal (plist-get item :disposition) "execute"))
        (should (eq (plist-get result :ok) t))
        (should (equal (plist-get (plist-get result :result) :content) "(message \"hi\")\n"))
        (should (forj-test--wait-for (lambda () (= (length events) 2)) 2))
        (should (equal (mapcar (lambda (e) (plist-get e :kind)) (reverse events))
                       '("started" "finished")))))))

(ert-deftest forj-test-epc-unauthenticated ()
  "A connection that skipped hello gets `unauthenticated' for everything."
  (forj-test-with-project '(("a.txt" . "a"))
    (let* ((worker (forj-test--worker root))
           (port (process-contact (forj-epc-connection-process (forj-worker-connection worker))
                                  :service))
           (stranger (forj-epc-connect port :name "stranger")))
      (unwind-protect
          (let ((err (should-error (forj-epc-call-sync stranger "ping" nil)
                                   :type 'forj-epc-error)))
            (should (equal (plist-get (cadr err) :type) "unauthenticated")))
        (forj-epc-close stranger)))))

(ert-deftest forj-test-epc-worker-killed-mid-batch ()
  "kill -9 of the worker fails the pending call within a second; the next call restarts."
  (forj-test-with-project `(("huge.txt" . ,(make-string 30000000 ?y))
                            ("cfg/config.toml" . "[tools.read_file]\nmax_scan_bytes = 1000000000\n"))
    (let* ((forj-worker-arguments (list "--config" (expand-file-name "cfg/config.toml" root)))
           (worker (forj-test--worker root))
           (pid (process-id (forj-worker-process worker)))
           (calls (vconcat (cl-loop for i below 8
                                    collect (list :id (format "c%d" i) :name "read_file"
                                                  :args (list :path "huge.txt" :start_line 2)))))
           (plan (forj-test--call worker "plan" (list :calls calls)))
           (failure nil))
      (forj-epc-call (forj-worker-connection worker) "execute"
                     (list :batch_id (plist-get plan :batch_id))
                     :success (lambda (_) (setq failure 'finished))
                     :error (lambda (e) (setq failure e)))
      (accept-process-output nil 0.2)
      (signal-process pid 'SIGKILL)
      (let ((killed (float-time)))
        (should (forj-test--wait-for (lambda () failure) 5))
        (should (< (- (float-time) killed) 1.0)))
      (should (equal (plist-get failure :type) "worker-died"))
      (let ((again (forj-test--worker root)))
        (should-not (eq again worker))
        (should-not (equal (process-id (forj-worker-process again)) pid))
        (should (null (forj-test--call again "ping" nil)))))))

(ert-deftest forj-test-epc-call-timeout ()
  "A call that outlives its timeout fails with `timeout', and the connection lives on."
  (forj-test-with-project `(("huge.txt" . ,(make-string 30000000 ?z))
                            ("cfg/config.toml" . "[tools.read_file]\nmax_scan_bytes = 1000000000\n"))
    (let* ((forj-worker-arguments (list "--config" (expand-file-name "cfg/config.toml" root)))
           (worker (forj-test--worker root))
           (plan (forj-test--call worker "plan"
                                  (list :calls (vconcat (cl-loop for i below 8 collect
                                                                 (list :id (format "t%d" i)
                                                                       :name "read_file"
                                                                       :args (list :path "huge.txt"
                                                                                   :start_line 2)))))))
           (err (should-error (forj-epc-call-sync (forj-worker-connection worker) "execute"
                                                  (list :batch_id (plist-get plan :batch_id))
                                                  :timeout 0.05)
                              :type 'forj-epc-error)))
      (should (equal (plist-get (cadr err) :type) "timeout"))
      (should (null (forj-test--call worker "ping" nil))))))

(ert-deftest forj-test-worker-that-cannot-start ()
  "A missing interpreter or a worker that dies at once ends in a readable error."
  (forj-test-with-project '(("a.txt" . "a"))
    (let ((forj-worker-python "/nonexistent/python3") failure)
      (forj-worker-ensure root #'ignore (lambda (e) (setq failure e)))
      (should (forj-test--wait-for (lambda () failure) 5))
      (should (equal (plist-get failure :type) "start-failed"))
      (should (string-match-p "cannot start the worker" (plist-get failure :message))))
    (let ((forj-worker-python (executable-find "false")) failure)
      (forj-worker-ensure root #'ignore (lambda (e) (setq failure e)))
      (should (forj-test--wait-for (lambda () failure) 10))
      (should (equal (plist-get failure :type) "worker-died"))
      (should (> (forj-worker--backoff (file-name-as-directory root)) 0)))
    (remhash (file-name-as-directory root) forj-worker--failures)))

(ert-deftest forj-test-worker-project-root ()
  "Outside any project the user is told so, plainly."
  (let ((dir (make-temp-file "forj-noproject-" t)))
    (unwind-protect
        (let ((err (should-error (forj-worker-project-root dir) :type 'user-error)))
          (should (string-match-p "not inside a project" (cadr err))))
      (delete-directory dir t))))

(ert-deftest forj-test-epc-errors-carry-recovery ()
  "A protocol error from the worker arrives as a plist with its recovery steps."
  (forj-test-with-project '(("a.txt" . "a"))
    (let* ((worker (forj-test--worker root))
           (err (should-error (forj-test--call worker "execute" (list :batch_id "nope"))
                              :type 'forj-epc-error)))
      (should (equal (plist-get (cadr err) :type) "unknown-batch"))
      (should (plist-get (cadr err) :recovery)))))

;;; JSON frames

(defun forj-test--frame (body)
  "BODY (a unibyte string) framed with its six hex digits of length."
  (concat (format "%06x" (length body)) body))

(defun forj-test--json-frame (header json &optional raw)
  "A JSON frame of HEADER (a string), JSON text and RAW trailing bytes."
  (forj-test--frame (concat header "\n" (encode-coding-string json 'utf-8)
                            (if raw (concat "\n" (encode-coding-string raw 'utf-8)) "")
                            "\n")))

(defconst forj-test--tricky "é ✓ 😀 \"q\" back\\slash\n(return-json 9)\n{\"a\": 1}\n"
  "Text with non-ASCII, quotes, backslashes and lines like frame headers.")

(defun forj-test--stream ()
  "Every kind of frame the worker sends, as one unibyte string."
  (let ((print-escape-newlines nil))
    (concat
     ;; A standard reply: JSON inside a Lisp string.
     (forj-test--frame (encode-coding-string
                        (concat (prin1-to-string
                                 (list 'return 1 (json-serialize (list :text forj-test--tricky))))
                                "\n")
                        'utf-8))
     ;; A JSON reply.
     (forj-test--json-frame "(return-json 2)"
                            (json-serialize (list :text forj-test--tricky :n 2 :none :null)))
     ;; An event with its output raw after the JSON.
     (let ((raw (encode-coding-string forj-test--tricky 'utf-8)))
       (forj-test--json-frame (format "(event-json %d)" (length raw))
                              "{\"kind\":\"stdout\",\"call_id\":\"c\",\"seq\":0}"
                              forj-test--tricky))
     ;; The same, all ASCII and said so.
     (forj-test--json-frame "(event-json 4 ascii)" "{\"kind\":\"stderr\"}" "a\nb\n")
     ;; An event all in JSON.
     (forj-test--json-frame "(event-json)" "{\"kind\":\"finished\",\"ok\":true}")
     ;; A reply whose long strings follow its JSON, raw, in order.
     (let ((one (encode-coding-string forj-test--tricky 'utf-8)))
       (forj-test--json-frame
        (format "(return-json 5 (raw ((\"results\" 0 \"content\") %d) ((\"note\") 3 ascii)))"
                (length one))
        "{\"results\":[{\"content\":null,\"n\":1}],\"note\":null}"
        (concat forj-test--tricky "abc")))
     ;; A raw string whose path names no null: an error for its call.
     (forj-test--json-frame "(return-json 6 (raw ((\"x\") 2)))" "{\"x\":1}" "ab")
     ;; A reply that is not valid JSON: an error for its call, not a stuck filter.
     (forj-test--json-frame "(return-json 3)" "{\"broken\": ")
     ;; A standard error.
     (forj-test--frame "(return-error 4 \"{\\\"type\\\":\\\"x\\\",\\\"message\\\":\\\"m\\\"}\")\n"))))

(defun forj-test--feed (chunks)
  "Feed CHUNKS to a connection's filter; return what its callbacks saw, in order."
  (let* ((seen nil)
         (buffer (generate-new-buffer " *forj-test-epc*"))
         (process (make-pipe-process :name "forj-test-epc" :buffer buffer :noquery t
                                     :filter #'ignore :sentinel #'ignore))
         (conn (forj-epc--make-connection :name "test" :process process
                                          :on-event
                                          (lambda (e)
                                            ;; Raw output is valid only during the call.
                                            (when (plist-member e :data)
                                              (setq e (plist-put (copy-sequence e) :data
                                                                 (forj-epc-event-data e))))
                                            (push (list 'event e) seen)))))
    (unwind-protect
        (progn
          (with-current-buffer buffer (set-buffer-multibyte nil))
          (process-put process 'forj-epc-connection conn)
          (dolist (uid '(1 2 3 4 5 6))
            (puthash uid (list (lambda (v) (push (list 'ok uid v) seen))
                               (lambda (e) (push (list 'error uid (plist-get e :type)) seen))
                               (run-at-time 600 nil #'ignore))
                     (forj-epc-connection-pending conn)))
          (dolist (chunk chunks) (forj-epc--filter process chunk))
          (should (= 0 (buffer-size buffer)))
          (nreverse seen))
      (maphash (lambda (_ entry) (cancel-timer (nth 2 entry))) (forj-epc-connection-pending conn))
      (delete-process process)
      (kill-buffer buffer))))

(ert-deftest forj-test-epc-json-frames-split-anywhere-give-the-same-messages ()
  "Frames of both kinds, cut into chunks at random places, read the same.
Chunks of one byte cut inside headers, lengths and UTF-8 sequences."
  (let* ((stream (forj-test--stream))
         (whole (forj-test--feed (list stream)))
         (state (cl-make-random-state 4)))
    (should (equal whole
                   `((ok 1 (:text ,forj-test--tricky))
                     (ok 2 (:text ,forj-test--tricky :n 2 :none :null))
                     (event (:kind "stdout" :call_id "c" :seq 0 :data ,forj-test--tricky))
                     (event (:kind "stderr" :data "a\nb\n"))
                     (event (:kind "finished" :ok t))
                     (ok 5 (:results [(:content ,forj-test--tricky :n 1)] :note "abc"))
                     (error 6 "bad-reply")
                     (error 3 "bad-reply")
                     (error 4 "x"))))
    (should (equal (forj-test--feed (mapcar #'char-to-string (string-to-list stream))) whole))
    (dotimes (_ 60)
      (let ((chunks nil) (pos 0))
        (while (< pos (length stream))
          (let ((next (min (length stream) (+ pos 1 (cl-random 40 state)))))
            (push (substring stream pos next) chunks)
            (setq pos next)))
        (should (equal (forj-test--feed (nreverse chunks)) whole))))))

(defun forj-test--long-text (edge)
  "EDGE, 70,000 plain characters, EDGE again: long enough to go raw.
Short enough in bytes for the default output limit however JSON
escapes EDGE."
  (concat edge (make-string 70000 ?x) "\n" edge))

(ert-deftest forj-test-epc-json-frames-negotiated-and-standard-frames-still-work ()
  "The worker answers in JSON frames only to a client that asked in hello.
Long strings come raw only to a client that offered that too, and
read the same either way."
  (forj-test-with-project `(("t.txt" . ,forj-test--tricky)
                            ("big.txt" . ,(forj-test--long-text forj-test--tricky))
                            ("ascii.txt" . ,(forj-test--long-text "say \"hi\" \\ there\n")))
    (let* ((worker (forj-test--worker root))
           (port (process-contact (forj-epc-connection-process (forj-worker-connection worker))
                                  :service))
           (big (forj-test--long-text forj-test--tricky))
           (ascii (forj-test--long-text "say \"hi\" \\ there\n"))
           (read-file (lambda (conn &optional path)
                        (let* ((plan (forj-epc-call-sync
                                      conn "plan"
                                      `(:calls [(:id "1" :name "read_file"
                                                     :args (:path ,(or path "t.txt")
                                                                  :max_bytes 1000000))])))
                               (done (forj-epc-call-sync
                                      conn "execute" (list :batch_id (plist-get plan :batch_id)
                                                           :capacity_bytes 1000000))))
                          (plist-get (plist-get (aref (plist-get done :results) 0) :result)
                                     :content)))))
      (should (equal (plist-get (forj-worker-hello worker) :frames) ["json" "raw"]))
      (should (equal (funcall read-file (forj-worker-connection worker)) forj-test--tricky))
      (should (equal (funcall read-file (forj-worker-connection worker) "big.txt") big))
      (should (equal (funcall read-file (forj-worker-connection worker) "ascii.txt") ascii))
      (let ((inline (forj-epc-connect port :name "inline"))
            (forj-epc-raw-strings nil))
        (unwind-protect
            (let ((hello (forj-epc-call-sync inline "hello"
                                             (list :token (forj-worker-token worker)))))
              (should (equal (plist-get hello :frames) ["json"]))
              (should (equal (funcall read-file inline "big.txt") big)))
          (forj-epc-close inline)))
      (let ((plain (forj-epc-connect port :name "plain"))
            (forj-epc-json-frames nil))
        (unwind-protect
            (let ((hello (forj-epc-call-sync plain "hello"
                                             (list :token (forj-worker-token worker)))))
              (should-not (plist-member hello :frames))
              (should (equal (funcall read-file plain) forj-test--tricky))
              (should (equal (funcall read-file plain "big.txt") big)))
          (forj-epc-close plain))))))

(provide 'forj-epc-test)
;;; forj-epc-test.el ends here
