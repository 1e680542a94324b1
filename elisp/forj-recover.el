;;; forj-recover.el --- Batches a stopped worker or Emacs left unfinished  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; The worker journals every call of a batch before planning it, and
;; each result before the next call starts.  When a worker starts on a
;; project whose journal holds a batch that never reached its end (the
;; worker or Emacs died), its `hello' lists it under `unfinished'.
;;
;; The chat that made the batch (or, when none is open, the chat that
;; started the worker) says which calls completed, with their results,
;; which was interrupted and which never ran, and waits: nothing runs
;; again by itself.  `M-x forj-recover' then resumes the calls that
;; never ran (each goes through the review again, also calls that
;; would run without asking) or discards them.  Either way the results
;; become the batch's tool results in the record, and the model is told
;; and resumed when the chat is the one whose reply made the calls.
;;
;; When the worker dies while the chat's own batch runs, the chat does
;; not record the bare "worker died" errors: it starts a new worker and
;; recovers the batch from the journal the same way.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj-loop)
(require 'forj-session)

(defvar-local forj-recover-pending nil
  "Unfinished batches this chat shows and waits on: the worker's reports.")

(defvar-local forj-recover--interrupted nil
  "The entries of this chat's batch whose worker died, until it is recovered.")

(defvar forj-recover--shown (make-hash-table :test #'equal)
  "Batch ids of unfinished batches already shown, to the chat showing them.
A batch resolved since maps to the symbol `resolved': the hello a
worker said at its start still lists it.")

;;; Showing

(defun forj-recover--owner (report)
  "Return the open chat whose record has REPORT's turn, or nil."
  (let ((turn (plist-get report :turn)))
    (and (stringp turn)
         (cl-find-if (lambda (buffer)
                       (and (eq (buffer-local-value 'major-mode buffer) 'forj-chat-mode)
                            (cl-find turn (forj-session-record (buffer-local-value 'forj-session buffer))
                                     :key (lambda (e) (plist-get e :turn)) :test #'equal)))
                     (buffer-list)))))

(defun forj-recover--call-line (call)
  "The one-line description of the recovered CALL (its state and result)."
  (let* ((entry (list :call (plist-get call :call)))
         (result (plist-get call :result))
         (line (substring-no-properties (forj-render-one-line (forj-render-call-line (plist-get call :call))))))
    (pcase (plist-get call :state)
      ("completed" (concat "  completed: " (forj-tools-header-text entry result)))
      ("running" (concat "  interrupted (it may have done part of its work): " line
                         (let ((files (plist-get call :files_changed)))
                           (if files (format " (it wrote %s)" (string-join (append files nil) ", ")) ""))))
      (_ (concat "  never ran: " line)))))

(defun forj-recover--show (report)
  "Show the unfinished batch REPORT in this chat and wait for the user's choice."
  (puthash (plist-get report :batch_id) (current-buffer) forj-recover--shown)
  (setq forj-recover-pending (append forj-recover-pending (list report)))
  (forj-session-notice (format "a batch of tool calls was left unfinished at %s: %s.  Nothing was run again."
                               (format-time-string "%Y-%m-%d %H:%M:%S" (or (plist-get report :time) 0))
                               (or (plist-get report :reason) "forj stopped")))
  (dolist (call (plist-get report :calls))
    (forj-session-notice (forj-recover--call-line call)))
  (forj-session-notice
   (substitute-command-keys
    "M-x forj-recover: resume the calls that never ran (you review each again) or discard them; the model is told either way"))
  (forj-recover--flush))

(defun forj-recover--flush ()
  "Show held notices now unless a reply streams or a batch draws its results.
A chat waiting for recovery has neither, though it is not idle."
  (unless (or (forj-session-reply forj-session) (forj-session-batch forj-session))
    (forj-session-flush-notices)))

(defun forj-recover--on-worker-ready (worker)
  "Show the unfinished batches WORKER's hello lists, each in one chat.
A batch shown in another chat moves to its own chat once that is open."
  (let ((chat (current-buffer)))
    (dolist (report (append (plist-get (forj-worker-hello worker) :unfinished) nil))
      (let* ((report (forj-recover--plist report))
             (id (plist-get report :batch_id))
             (shown (gethash id forj-recover--shown))
             (owner (forj-recover--owner report)))
        (unless (or (eq shown 'resolved)
                    (and (buffer-live-p shown) (or (null owner) (eq owner shown))))
          (when (buffer-live-p shown)
            (with-current-buffer shown
              (setq forj-recover-pending
                    (cl-remove id forj-recover-pending :key (lambda (r) (plist-get r :batch_id))
                               :test #'equal))
              (forj-session-notice "the unfinished batch above is shown in its own chat now")))
          (with-current-buffer (or owner chat)
            (forj-recover--show report)))))
    (when forj-recover--interrupted
      (forj-recover--interrupted-check))))

(defun forj-recover--plist (report)
  "Return a copy of REPORT with lists, not vectors, inside."
  (plist-put (copy-sequence report) :calls (append (plist-get report :calls) nil)))

(add-hook 'forj-chat-worker-ready-functions #'forj-recover--on-worker-ready)

;;; The chat's own batch, when its worker dies

(defun forj-recover--batch-interrupted (entries results &optional batch)
  "The worker died while BATCH of ENTRIES ran (RESULTS say only that).
Start a new worker once the old process is gone: the new one's journal
says what ran, and recovery follows."
  (setq forj-recover--interrupted (cons entries results))
  (forj-session-notice "the tool worker stopped while the batch ran; starting a new one to see what ran")
  (forj-recover--flush)
  (let* ((worker (and batch (forj-tools-batch-worker batch)))
         (process (and worker (forj-worker-process worker))))
    (forj-recover--when-gone (and (processp process) (process-id process))
                             (+ (float-time) 10)
                             (current-buffer))))

(defun forj-recover--when-gone (pid deadline buffer)
  "Once process PID is gone (or at DEADLINE), restart the worker for BUFFER.
A dead process not yet reaped still counts as running for the worker,
which would not report its batches; polling keeps Emacs free meanwhile."
  (if (and pid (process-attributes pid) (< (float-time) deadline))
      (run-at-time 0.1 nil #'forj-recover--when-gone pid deadline buffer)
    (when (buffer-live-p buffer)
      (with-current-buffer buffer (forj-recover--restart)))))

(defun forj-recover--restart ()
  "Start the chat's worker again; its hello lists the interrupted batch."
  (let ((buffer (current-buffer)))
    (forj-worker-ensure
     (forj-session-root forj-session)
     (lambda (worker)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer (forj-loop-worker-ready worker))))
     (lambda (err)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer
           (forj-session-notice (format "the tool worker could not start again: %s; send a message to go on"
                                        (or (plist-get err :message) err)))
           (forj-loop-end-turn)))))))

(defun forj-recover--interrupted-check ()
  "After a new hello: record the interrupted batch's errors if it is not listed.
A batch the worker never journaled ran nothing."
  (let ((ids (mapcar (lambda (e) (plist-get (plist-get e :call) :id)) (car forj-recover--interrupted))))
    (unless (cl-some (lambda (report)
                       (cl-intersection ids (mapcar (lambda (c) (plist-get c :id)) (plist-get report :calls))
                                        :test #'equal))
                     forj-recover-pending)
      (pcase-let ((`(,entries . ,results) forj-recover--interrupted))
        (setq forj-recover--interrupted nil)
        (forj-recover--record-results-now entries results)
        (forj-session-notice "the worker stopped before it recorded the batch: nothing of it ran.  Send a message to go on.")
        (forj-loop-end-turn)))))

(setq forj-chat-batch-interrupted-function #'forj-recover--batch-interrupted)

;;; Resolving

(defun forj-recover--record-results-now (entries results)
  "Add the tool results of ENTRIES and RESULTS to the record and draw them."
  (forj-session-show (forj-session-record-add "tool" (forj-session-results-text entries results))))

(defun forj-recover--answers-last-reply-p (report)
  "Return non-nil when REPORT answers the last reply of the record."
  (let ((last (cl-find "notice" (reverse (forj-session-record forj-session))
                       :key (lambda (e) (plist-get e :role)) :test-not #'equal)))
    (and (equal (plist-get last :role) "assistant")
         (let ((ids (mapcar (lambda (e) (plist-get (plist-get e :call) :id))
                            (forj-session-entry-calls last))))
           (and ids (cl-subsetp (mapcar (lambda (c) (plist-get c :id)) (plist-get report :calls))
                                ids :test #'equal))))))

;;;###autoload
(defun forj-recover (action &optional batch-id)
  "Resolve an unfinished batch shown in this chat: ACTION, `resume' or `discard'.
Resume plans the calls that never ran as a new batch; each is reviewed
again, also calls that would run without asking.  Discard answers them
as cancelled.  Either way the model receives every call's result.
BATCH-ID picks the batch (default: the oldest shown)."
  (interactive
   (progn
     (unless (and (derived-mode-p 'forj-chat-mode) forj-recover-pending)
       (user-error "No unfinished batch waits in this buffer"))
     (list (if (eq (car (read-multiple-choice
                         "Unfinished batch: "
                         '((?r "resume" "run the calls that never ran, after you review each")
                           (?d "discard" "do not run them; tell the model"))))
                   ?r)
               'resume 'discard))))
  (let ((report (if batch-id
                    (cl-find batch-id forj-recover-pending :key (lambda (r) (plist-get r :batch_id))
                             :test #'equal)
                  (car forj-recover-pending))))
    (unless report (user-error "No unfinished batch %s here" (or batch-id "")))
    (unless (or (eq (forj-session-state forj-session) 'idle)
                (and forj-recover--interrupted (null (forj-session-batch forj-session))))
      (user-error "The chat is busy; stop the turn first (C-c C-k)"))
    (forj-recover--resolve report action)))

(defun forj-recover--resolve (report action)
  "Ask the worker to resolve REPORT with ACTION, then give the model the results."
  (let ((buffer (current-buffer))
        (turn (cl-incf (forj-session-turn forj-session))))
    (setf (forj-session-state forj-session) 'tools (forj-session-cancelled forj-session) nil)
    (force-mode-line-update)
    (forj-worker-ensure
     (forj-session-root forj-session)
     (lambda (worker)
       (forj-epc-call (forj-worker-connection worker) "resolve_batch"
                      (list :batch_id (plist-get report :batch_id)
                            :action (symbol-name action))
                      :success (lambda (reply)
                                 (when (buffer-live-p buffer)
                                   (with-current-buffer buffer
                                     (forj-recover--resolved report reply turn))))
                      :error (lambda (err)
                               (when (buffer-live-p buffer)
                                 (with-current-buffer buffer
                                   (forj-recover--failed err))))))
     (lambda (err)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer (forj-recover--failed err)))))))

(defun forj-recover--failed (err)
  "Resolving failed with ERR: say so; the batch stays listed."
  (forj-session-notice (format "could not resolve the unfinished batch: %s" (or (plist-get err :message) err)))
  (forj-loop-end-turn))

(defun forj-recover--resolved (report reply turn)
  "The worker resolved REPORT with REPLY, in the chat's TURN: run or record."
  (setq forj-recover-pending (delq report forj-recover-pending))
  (puthash (plist-get report :batch_id) 'resolved forj-recover--shown)
  (let* ((entries (mapcar (lambda (c) (list :call (plist-get c :call))) (plist-get report :calls)))
         (known (append (plist-get reply :results) nil))
         (remaining (append (plist-get reply :remaining) nil)))
    (if (null remaining)
        (forj-recover--finish report entries known turn)
      (let* ((hidden (generate-new-buffer " *forj-recovered-batch*"))
             (root (forj-session-root forj-session))
             (chat (current-buffer))
             (batch (with-current-buffer hidden
                      (let ((forj-tools-turn (plist-get report :turn))
                            (forj-tools-review-all t))
                        (forj-tools-run-entries
                         (mapcar (lambda (call) (list :call call)) remaining) (point-max)
                         (lambda (results)
                           (when (buffer-live-p chat)
                             (with-current-buffer chat
                               (setf (forj-session-batch forj-session) nil)
                               (forj-recover--finish report entries (append known results) turn)))
                           (kill-buffer hidden))
                         root)))))
        (setf (forj-session-batch forj-session) batch)))))

(defun forj-recover--finish (report entries results turn)
  "Record RESULTS for the ENTRIES of REPORT; resume the model if it is its turn.
TURN is the chat's turn counter when resolving started: a stop since
then records the results without resuming."
  (let* ((by-id (mapcar (lambda (r) (cons (plist-get r :id) r)) results))
         (ordered (mapcar (lambda (e) (cdr (assoc (plist-get (plist-get e :call) :id) by-id))) entries))
         (own (forj-recover--answers-last-reply-p report)))
    (when-let ((root (forj-session-root forj-session)))
      (forj-files-applied root (forj-files-changed-by-results
                                (cl-loop for call in (plist-get report :calls)
                                         when (plist-get call :files_changed)
                                         collect (list :ok t :name "write_file"
                                                       :result (list :files
                                                                     (mapcar (lambda (p) (list :path p))
                                                                             (plist-get call :files_changed))))))))
    (setq forj-recover--interrupted nil)
    (forj-recover--record-results-now entries ordered)
    (if (and own (= turn (forj-session-turn forj-session)) (not (forj-session-cancelled forj-session))
             (forj-session-provider forj-session))
        (progn
          (setf (forj-session-state forj-session) 'streaming)
          (forj-loop-request))
      (forj-session-notice (if own
                               "the recovered results are in the conversation; send a message to go on"
                             "the recovered results are in this conversation (their own chat is not open); send a message to go on"))
      (forj-loop-end-turn))))

(provide 'forj-recover)
;;; forj-recover.el ends here
